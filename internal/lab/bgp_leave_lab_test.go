package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// leaveFlows is how many WebSockets the test holds open through the
// router in each phase: enough that each node's share of moved flows is
// read to a few points.
const leaveFlows = 240

// bgpLeaveLabEnv turns TestLabBGPNodeLeaveAndFail on.
const bgpLeaveLabEnv = "ZERODROP_LAB_BGP_LEAVE"

// TestLabBGPNodeLeaveAndFail runs zerodrop installed from the chart over
// three data-plane nodes behind FRR, once per router hashing (frr-resilient,
// frr-ecmp), under restart-idle's traffic (a long act that changes no
// route: the writers' containers restarted in place). While it runs, the
// test holds WebSockets of its own through the router, each one's node
// read from the nodes' sockets (ss in each node's namespace: which node's
// HAProxy took it), and:
//
//  1. a node leaves: the first of the router's next hops (hash-threshold's
//     ranges follow that order) gets the exclusion label, which its
//     speaker reads as leaving and withdraws on; once the router's kernel
//     route lacks it, every WebSocket sends one message. Broken flows per
//     node are reported beside hash-threshold's prediction for the
//     leaving member's position (dataplane.HashThresholdMoved); with
//     resilient groups none may break on the other nodes. The label is
//     then taken off and the node announced again; at the unbalanced
//     timer (frr-resilient: returnUnbalancedTimer; frr-ecmp: none) plus
//     4 s after the router routes it again, it must carry at least 80 %
//     of its 1/N share of new connections, and the WebSockets the return
//     broke on the other nodes are reported (bgp_leave_return_lab_test.go).
//  2. a node fails hard: the last of the router's next hops that holds
//     WebSockets has its uplink drop every packet, the link up (nftables in
//     its namespace), so only the router's BGP hold time (9 s, the chart's
//     value in the lab; no BFD) notices. A prober in a namespace of its
//     own behind the router opens a new connection every 20 ms
//     (bgp_prober_lab_test.go); its failure window is reported beside the
//     bound (the hold time plus the router's reaction, plus 1 s) and must
//     start within 0.5 s of the drop and end within 0.5 s of the router's
//     route lacking the node. Once the router's route lacks the node, no
//     new connection may fail, and with resilient groups no WebSocket on
//     another node may break.
//
// The bound is reported, not asserted. Two labs of about four minutes
// each, so it runs only when asked:
//
//	ZERODROP_LAB_BGP_LEAVE=1 go test -count=1 -v -run TestLabBGPNodeLeaveAndFail ./internal/lab/
func TestLabBGPNodeLeaveAndFail(t *testing.T) {
	if os.Getenv(bgpLeaveLabEnv) == "" {
		t.Skipf("set %s=1 to run a node leaving and failing behind FRR, with both hashings", bgpLeaveLabEnv)
	}
	for _, r := range []dataplane.Router{dataplane.RouterFRRResilient, dataplane.RouterFRRECMP} {
		t.Run(string(r), func(t *testing.T) { leaveAndFail(t, r) })
	}
}

func leaveAndFail(t *testing.T, router dataplane.Router) {
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var lf leaveFigures
	args := []string{"--scenario", "restart-idle", "--idle-restarts", "4", "--data-plane-replicas", "3", "--router", string(router)}
	if router == dataplane.RouterFRRResilient {
		lf.unbalanced = returnUnbalancedTimer
		args = append(args, "--router-unbalanced-timer", returnUnbalancedTimer.String())
	}
	res := frrRun(t, 8*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		lf = measureLeaveAndFail(t, ctx, router, lf.unbalanced, lines, workDir)
		lf.log(t, router)
	}, args...)
	t.Logf("the lab's own traffic through the leave and the failure: %d requests, %d failed, %d long connections, %d broken; connections per node %v",
		res.Requests, res.FailedRequests, res.LongConns, res.LongConnsBroken, res.DataPlaneSessions)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	lf.check(t, router)
}

// nodeFlows is what one node's WebSockets did in a phase.
type nodeFlows struct {
	Node      netip.Addr
	Position  int // in the router's next hops before the phase's event
	Flows     int
	Broken    int
	Predicted float64 // hash-threshold's share of its flows moved
}

// phaseFigures are one phase's: the node that left or failed, the
// router's next hops before and after, each node's flows, and how long the
// router took to take the node out from the event.
type phaseFigures struct {
	Node          netip.Addr
	Before, After []netip.Addr
	Nodes         []nodeFlows
	Unknown       int // WebSockets no node's sockets showed
	BrokenBefore  int // WebSockets that did not answer before the event
	Withdrawn     time.Duration
	// WithdrawnAfter is, where the phase reads it, the start of the
	// router's last read that still held the node (from the event): the
	// kernel's change lies between it and Withdrawn.
	WithdrawnAfter time.Duration
	WithdrawnOK    bool
	Returned       bool // the node was routed again afterwards
}

// leaveFigures are the test's two phases.
type leaveFigures struct {
	leave, fail phaseFigures
	back        returnFigures // the leaving node's return
	unbalanced  time.Duration // the resilient groups' unbalanced timer
	// window is the independent prober's through the hard failure.
	window            dataplane.Window
	done              bool // both phases ran
	trafficEndedFirst bool
}

// otherBroken are the broken flows on the nodes but the phase's.
func (p phaseFigures) otherBroken() int {
	n := 0
	for _, f := range p.Nodes {
		if f.Node != p.Node {
			n += f.Broken
		}
	}
	return n
}

func (lf leaveFigures) log(t *testing.T, router dataplane.Router) {
	for _, ph := range []struct {
		name string
		p    phaseFigures
	}{{"node leaving (exclusion label)", lf.leave}, {"hard failure (uplink dropping, link up)", lf.fail}} {
		p := ph.p
		t.Logf("%s, %s: %s; next hops %v -> %v, taken out %.1fs after the event (%v); %d WebSockets of no node, %d not answering before",
			router, ph.name, p.Node, p.Before, p.After, p.Withdrawn.Seconds(), p.WithdrawnOK, p.Unknown, p.BrokenBefore)
		for _, f := range p.Nodes {
			t.Logf("  node %s (position %d): %d WebSockets, %d broken; hash-threshold predicts %.0f%% moved (%.1f)",
				f.Node, f.Position, f.Flows, f.Broken, 100*f.Predicted, f.Predicted*float64(f.Flows))
		}
	}
	lf.back.log(t, router, lf.unbalanced)
	w := lf.window
	bound := dataplane.HoldTime + time.Second
	t.Logf("%s, hard failure: the prober (its own namespace, one connect every %s): %d of %d new connections failed, from %.2fs to %.2fs after the drop; the lab's window: from the drop to the router's route without the node, 0 to %.2fs (the kernel changed after %.2fs; bound: hold time %s plus the router's reaction, plus 1 s: %s); %d failed once the router had taken the node out",
		router, proberPeriod, w.Failed, w.Attempts, w.First.Seconds(), w.Last.Seconds(), lf.fail.Withdrawn.Seconds(), lf.fail.WithdrawnAfter.Seconds(), dataplane.HoldTime, bound, w.FailedAfterQuiet)
}

// check asserts the behaviour: both phases ran under the lab's traffic,
// the router took the node out each time and routed it again, no new
// connection failed once the failed node was out, and with resilient
// groups no WebSocket broke on another node.
func (lf leaveFigures) check(t *testing.T, router dataplane.Router) {
	if !lf.done {
		t.Fatal("the phases did not run")
	}
	if lf.trafficEndedFirst {
		t.Errorf("the lab's traffic ended before the phases were over")
	}
	for name, p := range map[string]phaseFigures{"leave": lf.leave, "fail": lf.fail} {
		if !p.WithdrawnOK {
			t.Errorf("%s: the router never took %s out (next hops %v)", name, p.Node, p.After)
		}
		if !p.Returned {
			t.Errorf("%s: %s was not routed again afterwards", name, p.Node)
		}
		if len(p.Before) != 3 {
			t.Errorf("%s: the router's next hops before were %v, want three nodes", name, p.Before)
		}
		if router == dataplane.RouterFRRResilient && p.otherBroken() != 0 {
			t.Errorf("%s with resilient groups: %d WebSockets broke on the nodes other than %s", name, p.otherBroken(), p.Node)
		}
	}
	if lf.window.Failed == 0 {
		t.Errorf("no new connection failed while %s's uplink dropped: the failure was not seen", lf.fail.Node)
	}
	if lf.window.FailedAfterQuiet != 0 {
		t.Errorf("%d new connections failed after the router had taken %s out", lf.window.FailedAfterQuiet, lf.fail.Node)
	}
	if lf.fail.WithdrawnOK {
		checkWindow(t, lf.window, lf.fail.WithdrawnAfter, lf.fail.Withdrawn)
	}
	lf.back.check(t)
}

// measureLeaveAndFail runs the two phases while the lab's traffic runs.
func measureLeaveAndFail(t *testing.T, ctx context.Context, router dataplane.Router, unbalanced time.Duration, lines *lineWatch, workDir string) (lf leaveFigures) {
	t.Helper()
	lf.unbalanced = unbalanced
	l, err := openLeaveLab(ctx, lines.String(), workDir)
	if err != nil {
		t.Error(err)
		return lf
	}
	if len(l.nodes) != 3 {
		t.Errorf("data-plane nodes %v, want 3", l.nodes)
		return lf
	}
	if err := l.leavePhase(ctx, &lf.leave, &lf.back, unbalanced); err != nil {
		t.Errorf("node leaving: %v", err)
		return lf
	}
	if err := l.failPhase(ctx, &lf.fail, &lf.window); err != nil {
		t.Errorf("hard failure: %v", err)
		return lf
	}
	lf.done = true
	select {
	case <-lines.seen("traffic end"):
		lf.trafficEndedFirst = true
	default:
	}
	return lf
}

// leavePhase is phase 1: the first of the router's next hops labelled
// leaving, the flows pinged once the router lacks it, the label taken off,
// and the node's return measured (measureReturn).
func (l *leaveLab) leavePhase(ctx context.Context, p *phaseFigures, back *returnFigures, unbalanced time.Duration) error {
	flows, err := l.openFlows(ctx, leaveFlows)
	if err != nil {
		return err
	}
	defer closeFlows(flows)
	if p.Before, err = l.order(ctx); err != nil {
		return err
	}
	if len(p.Before) == 0 {
		return fmt.Errorf("the router does not route %s", l.frontend.Addr())
	}
	okBefore := pingAll(ctx, flows)
	p.Node = p.Before[0]
	labelled := time.Now()
	if err := l.label(ctx, p.Node, true); err != nil {
		return err
	}
	labelOn := true
	defer func() {
		if labelOn {
			_ = l.label(context.WithoutCancel(ctx), p.Node, false)
		}
	}()
	var at time.Time
	p.After, at, p.WithdrawnOK = l.waitOrder(ctx, 30*time.Second, func(h []netip.Addr) bool { return len(h) > 0 && !slices.Contains(h, p.Node) })
	p.Withdrawn = at.Sub(labelled)
	time.Sleep(time.Second)
	okAfter := pingAll(ctx, flows)
	tally(p, flows, okBefore, okAfter)
	unlabelled := time.Now()
	if err := l.label(ctx, p.Node, false); err != nil {
		return err
	}
	labelOn = false
	var routed time.Time
	if _, routed, p.Returned = l.waitOrder(ctx, 60*time.Second, func(h []netip.Addr) bool { return len(h) == len(p.Before) }); !p.Returned {
		return nil
	}
	return l.measureReturn(ctx, back, p, flows, okAfter, unlabelled, routed, unbalanced)
}

// failPhase is phase 2: the last of the router's next hops that holds
// flows has its uplink drop every packet while the prober, in its own
// namespace, opens a new connection every proberPeriod; the flows are
// pinged once the router lacks the node, and the uplink is restored.
func (l *leaveLab) failPhase(ctx context.Context, p *phaseFigures, w *dataplane.Window) error {
	flows, err := l.openFlows(ctx, leaveFlows)
	if err != nil {
		return err
	}
	defer closeFlows(flows)
	if p.Before, err = l.order(ctx); err != nil {
		return err
	}
	okBefore := pingAll(ctx, flows)
	for _, h := range slices.Backward(p.Before) {
		if slices.ContainsFunc(flows, func(f *flow) bool { return f.node == h && okBefore[f] }) {
			p.Node = h
			break
		}
	}
	if !p.Node.IsValid() {
		return fmt.Errorf("no node of %v holds a WebSocket", p.Before)
	}
	prober, removeProber, err := l.openProber(ctx)
	if err != nil {
		return err
	}
	defer removeProber()
	stopProbe, attempts := probe(ctx, prober, l.frontend, proberPeriod)
	time.Sleep(time.Second)
	failed := time.Now()
	if err := dataplane.FailUplink(ctx, l.nodes[p.Node]); err != nil {
		stopProbe()
		return err
	}
	restored := false
	restore := func() error {
		if restored {
			return nil
		}
		restored = true
		return dataplane.RestoreUplink(context.WithoutCancel(ctx), l.nodes[p.Node])
	}
	defer restore()
	var span orderSpan
	p.After, span, p.WithdrawnOK = l.waitOrderSpan(ctx, dataplane.HoldTime+60*time.Second, func(h []netip.Addr) bool { return len(h) > 0 && !slices.Contains(h, p.Node) })
	out := span.by
	p.Withdrawn, p.WithdrawnAfter = out.Sub(failed), span.after.Sub(failed)
	time.Sleep(2 * time.Second)
	stopProbe()
	quiet := out
	if !p.WithdrawnOK {
		quiet = time.Time{}
	}
	*w = dataplane.FailureWindow(*attempts, failed, quiet)
	tally(p, flows, okBefore, pingAll(ctx, flows))
	if err := restore(); err != nil {
		return err
	}
	_, _, p.Returned = l.waitOrder(ctx, 60*time.Second, func(h []netip.Addr) bool { return len(h) == len(p.Before) })
	return nil
}
