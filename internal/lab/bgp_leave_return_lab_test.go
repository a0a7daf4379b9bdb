package lab

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// A node returning behind the router (issue 51's acceptance): once the
// label that made it leave is taken off and the router routes it again,
// it must carry at least 80 % of its 1/N share of new connections within
// the resilient groups' unbalanced timer plus 5 s; the flows on the other
// nodes that the return broke are reported. With resilient groups a
// member added gets only buckets idle for the idle timer (120 s), none
// under steady traffic, so the test gives frr-resilient an unbalanced
// timer (--router-unbalanced-timer), after which the kernel moves buckets
// to it anyway, breaking the flows on them; hash-threshold ECMP gives the
// node its share at once, and moves flows of the others too.

// returnUnbalancedTimer is the unbalanced timer the test gives
// frr-resilient's groups.
const returnUnbalancedTimer = 10 * time.Second

// returnAfter is how long after the unbalanced timer the node's share is
// read: the acceptance's 5 s, less 1 s for opening the connections.
const returnAfter = 4 * time.Second

// returnConns is how many new connections are opened (in batches of
// returnBatch) to read the node's share: enough that a share of a third
// falls under 80 % of itself by chance less than once in a thousand.
const (
	returnConns = 600
	returnBatch = 200
)

// returnShare is the acceptance: the node carries at least this much of
// its 1/N share of new connections.
const returnShare = 0.8

// returnFigures are the leave phase's node's return.
type returnFigures struct {
	Node netip.Addr
	N    int // the router's next hops once it was back
	// Routed is from the label's removal to the router's route with the
	// node again; Opened the new connections' first and last, from then.
	Routed time.Duration
	Opened [2]time.Duration
	// Conns were opened and held by some node, OnNode by the returned one;
	// Unknown no node's sockets showed.
	Conns, OnNode, Unknown int
	// BucketsRouted and BucketsRead are the resilient group's buckets per
	// node when the node was routed again and when its share was read
	// (none with frr-ecmp).
	BucketsRouted, BucketsRead map[netip.Addr]int
	// Others are the leave phase's WebSockets on the other nodes that
	// still answered after the leave, and those the return broke.
	Others []nodeFlows
}

// share is the node's share of the new connections, as a fraction of its
// 1/N.
func (r returnFigures) share() float64 {
	if r.Conns == 0 || r.N == 0 {
		return 0
	}
	return float64(r.OnNode) / float64(r.Conns) * float64(r.N)
}

func (r returnFigures) log(t *testing.T, router dataplane.Router, unbalanced time.Duration) {
	t.Logf("%s, node returning: %s routed again %.1fs after the label's removal (unbalanced timer %s); new connections opened from %.1fs to %.1fs after: %d of %d on it (%.0f%% of its 1/%d share), %d of no node",
		router, r.Node, r.Routed.Seconds(), unbalanced, r.Opened[0].Seconds(), r.Opened[1].Seconds(), r.OnNode, r.Conns, 100*r.share(), r.N, r.Unknown)
	if len(r.BucketsRouted) > 0 || len(r.BucketsRead) > 0 {
		t.Logf("  buckets per node when routed again %v, when read %v", r.BucketsRouted, r.BucketsRead)
	}
	for _, f := range r.Others {
		t.Logf("  node %s: %d WebSockets open through the return, %d broken by it", f.Node, f.Flows, f.Broken)
	}
}

// check asserts the acceptance: the node's share of new connections.
func (r returnFigures) check(t *testing.T) {
	if r.Conns < returnConns/2 {
		t.Errorf("return: only %d new connections were read on a node", r.Conns)
		return
	}
	if r.share() < returnShare {
		t.Errorf("return: %s carried %d of %d new connections, %.0f%% of its 1/%d share, want at least %.0f%%",
			r.Node, r.OnNode, r.Conns, 100*r.share(), r.N, 100*returnShare)
	}
}

// measureReturn reads the return of the leave phase's node p.Node,
// routed again at routed (unlabelled: the label's removal): the group's
// buckets then; at unbalanced plus returnAfter after it, the node's share
// of returnConns new connections and the buckets; then which of flows
// (the leave phase's WebSockets, alive after the leave) broke.
func (l *leaveLab) measureReturn(ctx context.Context, r *returnFigures, p *phaseFigures, flows []*flow, alive map[*flow]bool,
	unlabelled, routed time.Time, unbalanced time.Duration) error {
	r.Node, r.Routed, r.N = p.Node, routed.Sub(unlabelled), len(p.Before)
	var err error
	if r.BucketsRouted, err = dataplane.Buckets(ctx, l.router, l.frontend.Addr()); err != nil {
		return err
	}
	time.Sleep(time.Until(routed.Add(unbalanced + returnAfter)))
	r.Opened[0] = time.Since(routed)
	for range returnConns / returnBatch {
		conns, onNode, unknown, err := l.newConnsOn(ctx, p.Node, returnBatch)
		if err != nil {
			return err
		}
		r.Conns, r.OnNode, r.Unknown = r.Conns+conns, r.OnNode+onNode, r.Unknown+unknown
	}
	r.Opened[1] = time.Since(routed)
	if r.BucketsRead, err = dataplane.Buckets(ctx, l.router, l.frontend.Addr()); err != nil {
		return err
	}
	okNow := pingAll(ctx, flows)
	for _, h := range p.Before {
		if h == p.Node {
			continue
		}
		nf := nodeFlows{Node: h, Position: slices.Index(p.Before, h)}
		for _, f := range flows {
			if f.node == h && alive[f] {
				nf.Flows++
				if !okNow[f] {
					nf.Broken++
				}
			}
		}
		r.Others = append(r.Others, nf)
	}
	return nil
}

// newConnsOn opens n TCP connections from the client's namespace to the
// frontend, reads which node holds each (HeldBy), and closes them: how
// many some node held, how many node did, and how many none showed.
func (l *leaveLab) newConnsOn(ctx context.Context, node netip.Addr, n int) (conns, onNode, unknown int, err error) {
	var mu sync.Mutex
	var open []net.Conn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if c, err := l.client.DialContext(dctx, "tcp", l.frontend.String()); err == nil {
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	held, err := dataplane.HeldBy(ctx, l.nodes, l.clientIP, l.frontend)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, c := range open {
		h, ok := held[uint16(c.LocalAddr().(*net.TCPAddr).Port)]
		switch {
		case !ok:
			unknown++
		case h == node:
			conns++
			onNode++
		default:
			conns++
		}
	}
	return conns, onNode, unknown, nil
}

// TestRouterUnbalancedTimerFlag (dry runs only): --router-unbalanced-timer
// takes whole seconds with --router frr-resilient only, and the plan
// names it.
func TestRouterUnbalancedTimerFlag(t *testing.T) {
	chart := []string{"--dry-run", "--from-chart", "--data-plane-replicas", "3", "--scenario", "restart-idle", "--mode", "zerodrop"}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{slices.Concat(chart, []string{"--router", "frr-resilient", "--router-unbalanced-timer", "10s"}), 0, "router frr-resilient (unbalanced timer 10s)"},
		{slices.Concat(chart, []string{"--router", "frr-resilient"}), 0, "router frr-resilient"},
		{slices.Concat(chart, []string{"--router", "frr-ecmp", "--router-unbalanced-timer", "10s"}), 2, "with --router frr-resilient"},
		{slices.Concat(chart, []string{"--router", "frr-resilient", "--router-unbalanced-timer", "1500ms"}), 2, "want whole seconds"},
		{slices.Concat(chart, []string{"--router", "frr-resilient", "--router-unbalanced-timer", "-1s"}), 2, "want whole seconds"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("zerodrop lab %v: exit %d, want %d, with %q in:\n%s", tc.args, code, tc.code, tc.want, out)
		}
		if tc.code == 0 && !slices.Contains(tc.args, "--router-unbalanced-timer") && strings.Contains(out, "unbalanced timer") {
			t.Errorf("zerodrop lab %v: the plan names an unbalanced timer none was given:\n%s", tc.args, out)
		}
	}
}
