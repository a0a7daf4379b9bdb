package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// bgpRefuseTable is the nftables table in the router's namespace that
// answers one node's new BGP connections with a reset.
const bgpRefuseTable = "zerodrop_lab_bgp_refuse"

// bgpRefuseScript resets every new TCP connection from node to the
// router's BGP port (a SYN without ACK); the established session is left
// alone, so only a new speaker is kept out.
func bgpRefuseScript(node netip.Addr) string {
	return fmt.Sprintf(`table inet %s {
	chain in {
		type filter hook input priority filter; policy accept;
		ip saddr %s tcp dport 179 tcp flags & (syn | ack) == syn reject with tcp reset
	}
}
`, bgpRefuseTable, node)
}

// pastFigures are what restartPast saw.
type pastFigures struct {
	// out is the withdrawal (Node the held node, Before and After the
	// router's next hops in the kernel's order, Withdrawn from the kill),
	// back the return (Withdrawn: from the block's end to the node routed
	// again).
	out, back phaseFigures
	// heldBroken: the test's WebSockets (of those answering before the
	// kill) that did not answer 30 s into the restart time.
	heldBroken, heldFlows int
	polls                 int
	changes               []hopChange
	killed                time.Time
	session               dataplane.Session // when the node was routed again
	done                  bool
	trafficEndedFirst     bool
}

// restartPast holds one node's speaker past the graceful-restart time,
// under restart-idle's 6 restarts (an act of about three minutes whose
// restarts change no route, as the within subtest shows).
func restartPast(t *testing.T) {
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var pf pastFigures
	res := frrRun(t, 10*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		if err := pf.measure(ctx, lines, workDir); err != nil {
			t.Error(err)
		}
	}, "--scenario", "restart-idle", "--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
	t.Logf("restart-idle through FRR with a speaker held past the restart time: %d requests, %d failed (%d by a client stall), %d long connections, %d broken; per restart failed %v, broken %v",
		res.Requests, res.FailedRequests, res.RequestsLateStall, res.LongConns, res.LongConnsBroken, res.FailedPerRestart, res.BrokenPerRestart)
	pf.log(t)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	pf.check(t)
}

func (pf pastFigures) log(t *testing.T) {
	t.Helper()
	t.Logf("speaker of %s: SIGKILL, its new connections refused; router next hops %v -> %v %.1fs after the kill (%v; restart time %s); %d of %d WebSockets broken 30 s into it",
		pf.out.Node, pf.out.Before, pf.out.After, pf.out.Withdrawn.Seconds(), pf.out.WithdrawnOK, dataplane.GracefulRestartTime, pf.heldBroken, pf.heldFlows)
	t.Logf("refusal lifted: next hops %v -> %v %.1fs later (%v); session %s, established %d times, dropped %d",
		pf.back.Before, pf.back.After, pf.back.Withdrawn.Seconds(), pf.back.WithdrawnOK, pf.session.State, pf.session.Established, pf.session.Dropped)
	for _, ph := range []struct {
		name string
		p    phaseFigures
	}{{"withdrawal", pf.out}, {"return", pf.back}} {
		for _, f := range ph.p.Nodes {
			t.Logf("  %s, node %s (position %d): %d WebSockets, %d broken; hash-threshold predicts %.0f%% moved (%.1f)",
				ph.name, f.Node, f.Position, f.Flows, f.Broken, 100*f.Predicted, f.Predicted*float64(f.Flows))
		}
		t.Logf("  %s: %d WebSockets of no node, %d not answering before", ph.name, ph.p.Unknown, ph.p.BrokenBefore)
	}
	t.Logf("router next hops read %d times; changes: %v", pf.polls, pf.changes)
}

// check asserts the behaviour: the router kept the node through the
// restart time (no change of the next-hop set before it, no WebSocket
// broken in it), withdrew it after, the node alone, and routed it again
// once its speaker could dial.
func (pf pastFigures) check(t *testing.T) {
	t.Helper()
	if !pf.done {
		t.Fatal("the phase did not run")
	}
	if pf.trafficEndedFirst {
		t.Errorf("the lab's traffic ended before the phase was over")
	}
	if !pf.out.WithdrawnOK {
		t.Fatalf("the router never withdrew %s after the restart time (next hops %v): a stale route", pf.out.Node, pf.out.After)
	}
	first := slices.IndexFunc(pf.changes, func(c hopChange) bool { return c.Err == nil })
	if first < 0 || pf.changes[first].At.Sub(pf.killed) < dataplane.GracefulRestartTime {
		t.Errorf("the router's next hops changed before the restart time (%s) had passed: %v", dataplane.GracefulRestartTime, pf.changes)
	}
	if want := slices.DeleteFunc(slices.Clone(pf.out.Before), func(a netip.Addr) bool { return a == pf.out.Node }); !slices.Equal(pf.out.After, want) {
		t.Errorf("the withdrawal left %v, want %v", pf.out.After, want)
	}
	if pf.heldFlows == 0 || pf.heldBroken != 0 {
		t.Errorf("%d of %d WebSockets broke within the restart time; want some, none broken", pf.heldBroken, pf.heldFlows)
	}
	if !pf.back.WithdrawnOK || pf.session.State != "Established" {
		t.Errorf("%s was not routed again (next hops %v, session %s)", pf.out.Node, pf.back.After, pf.session.State)
	}
}

func (pf *pastFigures) measure(ctx context.Context, lines *lineWatch, workDir string) error {
	l, err := openRestartLab(ctx, lines, workDir)
	if err != nil {
		return err
	}
	ended := lines.seen("traffic end")
	if pf.out.Before, err = l.order(ctx); err != nil {
		return err
	}
	// The first member in the kernel's order: hash-threshold then moves
	// none of the other's flows at the withdrawal.
	node := pf.out.Before[0]
	pf.out.Node, pf.back.Node = node, node
	speakers, err := speakerProcesses([]netip.Addr{node})
	if err != nil || len(speakers) != 1 {
		return fmt.Errorf("the speaker of %s: %v (%v)", node, speakers, err)
	}
	flows, err := l.openFlows(ctx, restartFlows)
	if err != nil {
		return err
	}
	defer func() { closeFlows(flows) }()
	okBefore := pingAll(ctx, flows)
	hops := watchHops(ctx, l.router, l.addr, l.hops)
	defer func() { pf.polls, pf.changes = hops.Stop() }()
	router := &netlab.Netns{Name: l.router}
	if err := router.NFT(ctx, bgpRefuseScript(node)); err != nil {
		return err
	}
	refusing := true
	lift := func() error {
		if !refusing {
			return nil
		}
		refusing = false
		return router.Run(context.WithoutCancel(ctx), "nft", "delete", "table", "inet", bgpRefuseTable)
	}
	defer lift()
	pf.killed = time.Now()
	if err := syscall.Kill(speakers[node].pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the speaker of %s: %w", node, err)
	}
	// Within the restart time: the router keeps the node's routes (stale),
	// and its HAProxy, still serving, keeps its connections.
	select {
	case <-time.After(30 * time.Second):
	case <-ended:
		pf.trafficEndedFirst = true
		return nil
	}
	okHeld := pingAll(ctx, flows)
	for _, f := range flows {
		if okBefore[f] {
			pf.heldFlows++
			if !okHeld[f] {
				pf.heldBroken++
			}
		}
	}
	var at time.Time
	pf.out.After, at, pf.out.WithdrawnOK = hops.until(ctx, ended, dataplane.GracefulRestartTime+time.Minute,
		func(h []netip.Addr) bool { return len(h) > 0 && !slices.Contains(h, node) })
	pf.out.Withdrawn = at.Sub(pf.killed)
	if !pf.out.WithdrawnOK {
		pf.trafficEndedFirst = isClosed(ended)
		return nil
	}
	if order, err := l.order(ctx); err == nil {
		pf.out.After = order
	}
	time.Sleep(time.Second)
	tally(&pf.out, flows, okBefore, pingAll(ctx, flows))
	closeFlows(flows)
	// The return: new WebSockets, all through the node that stayed, then
	// the refusal lifted; the speaker's next attempt (every 5 s) gets in.
	if flows, err = l.openFlows(ctx, restartFlows); err != nil {
		return err
	}
	okBefore = pingAll(ctx, flows)
	pf.back.Before = pf.out.After
	if err := lift(); err != nil {
		return err
	}
	lifted := time.Now()
	_, at, pf.back.WithdrawnOK = hops.until(ctx, ended, time.Minute, func(h []netip.Addr) bool { return len(h) == len(pf.out.Before) })
	pf.back.Withdrawn = at.Sub(lifted)
	if pf.back.After, err = l.order(ctx); err != nil {
		return err
	}
	time.Sleep(time.Second)
	tally(&pf.back, flows, okBefore, pingAll(ctx, flows))
	if s, err := l.frr.Sessions(ctx); err == nil {
		pf.session = s[node]
	}
	pf.done = true
	pf.trafficEndedFirst = isClosed(ended)
	return nil
}

// isClosed: ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
