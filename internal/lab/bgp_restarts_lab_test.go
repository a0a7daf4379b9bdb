package lab

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// bgpRestartsLabEnv turns TestLabBGPRestarts on.
const bgpRestartsLabEnv = "ZERODROP_LAB_BGP_RESTARTS"

// restartFlows is how many WebSockets of its own the test holds through
// the router in a phase: enough that each node holds dozens.
const restartFlows = 120

// TestLabBGPRestarts is issue 51's restart point, with the chart's one
// BGP configuration (no BFD; in the lab haproxy.bgp.holdTime 9s and the
// default gracefulRestartTime 120s), two data-plane nodes behind FRR's
// hash-threshold ECMP (--router frr-ecmp), one lab per subtest:
//
//   - within: under restart-idle with 3 restarts — the data-plane pods'
//     zerodrop processes (the one writer of each node's HAProxy) get
//     SIGKILL on one node, SIGTERM on the other, then SIGKILL again, as a
//     crash and as the kubelet's stop of the container, and the kubelet
//     starts each again (the control role's leader restarted with them) —
//     each node's speaker is killed (SIGKILL) and started again by the
//     kubelet, the second once the first is back. Nothing may break (the
//     lab's traffic and WebSockets, and 120 of the test's own on both
//     nodes), the router's next-hop set for the Service's address (ip -j
//     route and nexthop in its namespace, every 100 ms) never changes, each
//     session comes back with the new speaker's End-of-RIB and no
//     NOTIFICATION, and both nodes' zerodrop processes were replaced.
//   - update: lb-update with surge (--data-plane-hard-stop-after 10s), the
//     data-plane pods replaced as an update of zerodrop replaces them, the
//     new pod beside the old: lossless by the lab's check, the next-hop
//     set never changes, and both nodes' zerodrop processes replaced.
//   - past: one node's speaker held past the restart time: the router's
//     namespace answers that node's new BGP connections with a reset
//     (nftables), then its speaker gets SIGKILL, so the kubelet's restart
//     cannot reach the router. The router must keep the node through the
//     restart time and withdraw it after (a route kept past it would be
//     stale), and route it again once the block is lifted. The test's
//     WebSockets broken per node at the withdrawal and at the return
//     (hash-threshold's prediction beside) and the lab's failed requests
//     and broken WebSockets are reported, not asserted.
//
// About 8 minutes of labs, so it runs only when asked:
//
//	ZERODROP_LAB_BGP_RESTARTS=1 go test -count=1 -v -run TestLabBGPRestarts ./internal/lab/
func TestLabBGPRestarts(t *testing.T) {
	if os.Getenv(bgpRestartsLabEnv) == "" {
		t.Skipf("set %s=1 to run the speakers' and zerodrop's restarts behind FRR, within and past the graceful-restart time", bgpRestartsLabEnv)
	}
	t.Run("within", restartsWithin)
	t.Run("update", restartsUpdate)
	t.Run("past", restartPast)
}

// restartLab is what the subtests reach of a lab behind FRR: leaveLab's
// parts, the router's FRR, the Service's route and its next hops before.
type restartLab struct {
	*leaveLab
	frr  *dataplane.FRR
	addr netip.Prefix
	hops []netip.Addr
}

func openRestartLab(ctx context.Context, lines *lineWatch, workDir string) (*restartLab, error) {
	l, err := openLeaveLab(ctx, lines.String(), workDir)
	if err != nil {
		return nil, err
	}
	_, vty, err := labRouter()
	if err != nil {
		return nil, err
	}
	r := &restartLab{leaveLab: l, frr: dataplane.OpenFRR(vty), addr: netip.PrefixFrom(l.frontend.Addr(), 32)}
	routes, err := dataplane.NextHops(ctx, l.router, r.addr)
	if err != nil {
		return nil, err
	}
	if r.hops = routes[r.addr]; len(r.hops) != 2 {
		return nil, fmt.Errorf("the router routes %s through %v, want both nodes", r.addr, r.hops)
	}
	return r, nil
}

// dataPlaneWriters are the data-plane pods' zerodrop processes (`zerodrop
// controller --role=data-plane`, the one writer of each node's HAProxy),
// by node.
func dataPlaneWriters(hosts []netip.Addr) (map[netip.Addr][]chartProc, error) {
	return zerodropProcesses(hosts, func(args []string) bool {
		return args[1] == "controller" && slices.Contains(args, "--role=data-plane")
	})
}

// writersReplaced: every node has a writer now, and none of them ran before.
func writersReplaced(before, now map[netip.Addr][]chartProc) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for h, old := range before {
		out[h] = len(now[h]) > 0 && !slices.ContainsFunc(now[h], func(p chartProc) bool { return slices.Contains(old, p) })
	}
	return out
}

// speakerKill is one speaker's SIGKILL and its return.
type speakerKill struct {
	host    netip.Addr
	back    time.Duration // from the signal until its session was back
	ok      bool          // back before the traffic ended
	session dataplane.Session
}

// killSpeaker sends SIGKILL to host's speaker and waits until the
// router's session with it is Established again (the kubelet starts the
// speaker after its back-off) with the new speaker's End-of-RIB, or the
// traffic ends.
func (l *restartLab) killSpeaker(ctx context.Context, lines *lineWatch, host netip.Addr) (speakerKill, error) {
	k := speakerKill{host: host}
	speakers, err := speakerProcesses([]netip.Addr{host})
	if err != nil || len(speakers) != 1 {
		return k, fmt.Errorf("the speaker of %s: %v (%v)", host, speakers, err)
	}
	before, err := l.frr.Sessions(ctx)
	if err != nil {
		return k, err
	}
	signalled := time.Now()
	if err := syscall.Kill(speakers[host].pid, syscall.SIGKILL); err != nil {
		return k, fmt.Errorf("kill the speaker of %s: %w", host, err)
	}
	for ctx.Err() == nil {
		s, err := l.frr.Sessions(ctx)
		if x := s[host]; err == nil && x.State == "Established" && x.Established > before[host].Established && endOfRib(x) {
			k.back, k.session, k.ok = time.Since(signalled), x, true
			return k, nil
		}
		select {
		case <-lines.seen("traffic end"):
			return k, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	return k, ctx.Err()
}

// withinFigures are what restartsWithin saw.
type withinFigures struct {
	hops     []netip.Addr
	polls    int
	changes  []hopChange
	kills    []speakerKill
	replaced map[netip.Addr]bool
	// flows: the test's WebSockets that answered before the restarts, by
	// node; broken: those of them that did not answer after.
	flows, broken     map[netip.Addr]int
	trafficEndedFirst bool
}

// restartsWithin kills each node's speaker in turn while restart-idle
// restarts the data-plane writers, and pings the test's WebSockets once
// both writers were replaced.
func restartsWithin(t *testing.T) {
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var wf withinFigures
	res := frrRun(t, 6*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		if err := wf.measure(ctx, lines, workDir); err != nil {
			t.Error(err)
		}
	}, "--scenario", "restart-idle", "--idle-restarts", "3", "--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
	t.Logf("restart-idle (3 restarts) through FRR: %d requests, %d failed (%d by a client stall), %d long connections, %d broken; per restart failed %v, broken %v",
		res.Requests, res.FailedRequests, res.RequestsLateStall, res.LongConns, res.LongConnsBroken, res.FailedPerRestart, res.BrokenPerRestart)
	for _, k := range wf.kills {
		t.Logf("speaker of %s: SIGKILL, session back %.1fs later (%v): established %d times, dropped %d, %d NOTIFICATIONs received",
			k.host, k.back.Seconds(), k.ok, k.session.Established, k.session.Dropped, k.session.Messages.NotificationsRecv)
	}
	t.Logf("the test's WebSockets by node %v, broken %v; zerodrop's process replaced by node %v", wf.flows, wf.broken, wf.replaced)
	t.Logf("router next hops %v, read %d times until the traffic ended; changes: %v", wf.hops, wf.polls, wf.changes)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	if res.FailedRequests-res.RequestsLateStall != 0 || res.LongConnsBroken != 0 {
		t.Errorf("the restarts lost the lab's traffic: %d failed (%d by a client stall), %d broken long connections",
			res.FailedRequests, res.RequestsLateStall, res.LongConnsBroken)
	}
	if len(res.FailedPerRestart) != 3 {
		t.Errorf("restart-idle made %d restarts, want 3", len(res.FailedPerRestart))
	}
	if len(wf.changes) > 0 || wf.polls == 0 {
		t.Errorf("the router's next-hop set changed during the restarts (read %d times): %v", wf.polls, wf.changes)
	}
	if len(wf.kills) != 2 || slices.ContainsFunc(wf.kills, func(k speakerKill) bool { return !k.ok || k.session.Messages.NotificationsRecv != 0 }) {
		t.Errorf("speaker kills %+v: want both back (Established, End-of-RIB) before the traffic ended, no NOTIFICATION", wf.kills)
	}
	for _, h := range wf.hops {
		if !wf.replaced[h] {
			t.Errorf("zerodrop's process on %s was not replaced during the traffic", h)
		}
		if wf.flows[h] == 0 || wf.broken[h] != 0 {
			t.Errorf("node %s: %d of the test's WebSockets, %d broken; want some, none broken", h, wf.flows[h], wf.broken[h])
		}
	}
	if wf.trafficEndedFirst {
		t.Errorf("the traffic ended before the restarts were over")
	}
}

func (wf *withinFigures) measure(ctx context.Context, lines *lineWatch, workDir string) error {
	l, err := openRestartLab(ctx, lines, workDir)
	if err != nil {
		return err
	}
	wf.hops = l.hops
	before, err := dataPlaneWriters(l.hops)
	if err != nil || len(before) != len(l.hops) {
		return fmt.Errorf("the data-plane writers of %v: %v (%v)", l.hops, before, err)
	}
	flows, err := l.openFlows(ctx, restartFlows)
	if err != nil {
		return err
	}
	defer closeFlows(flows)
	okBefore := pingAll(ctx, flows)
	hops := watchHops(ctx, l.router, l.addr, l.hops)
	defer func() {
		select {
		case <-lines.seen("traffic end"):
		case <-ctx.Done():
		}
		wf.polls, wf.changes = hops.Stop()
	}()
	for _, h := range l.hops {
		k, err := l.killSpeaker(ctx, lines, h)
		wf.kills = append(wf.kills, k)
		if err != nil {
			return err
		}
		if !k.ok {
			wf.trafficEndedFirst = true
			return nil
		}
	}
	// restart-idle's first two restarts (one a node), then 5 s for the new
	// writers' first syncs (what would touch HAProxy's connections, if
	// anything did).
	for {
		now, err := dataPlaneWriters(l.hops)
		if err != nil {
			return err
		}
		wf.replaced = writersReplaced(before, now)
		if !slices.Contains(slices.Collect(maps.Values(wf.replaced)), false) {
			break
		}
		select {
		case <-lines.seen("traffic end"):
			wf.trafficEndedFirst = true
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(5 * time.Second)
	okAfter := pingAll(ctx, flows)
	wf.flows, wf.broken = map[netip.Addr]int{}, map[netip.Addr]int{}
	for _, f := range flows {
		if okBefore[f] {
			wf.flows[f.node]++
			if !okAfter[f] {
				wf.broken[f.node]++
			}
		}
	}
	select {
	case <-lines.seen("traffic end"):
		wf.trafficEndedFirst = true
	default:
	}
	return nil
}

// restartsUpdate updates the data-plane DaemonSet (surge) behind FRR: the
// route must not move while each node's pod is replaced.
func restartsUpdate(t *testing.T) {
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var (
		hops       []netip.Addr
		polls      int
		changes    []hopChange
		swapped    map[netip.Addr]bool
		endedFirst bool
	)
	res := frrRun(t, 6*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		l, err := openRestartLab(ctx, lines, workDir)
		if err != nil {
			t.Error(err)
			return
		}
		hops = l.hops
		before, err := dataPlaneWriters(l.hops)
		if err != nil || len(before) != len(l.hops) {
			t.Errorf("the data-plane writers of %v: %v (%v)", l.hops, before, err)
			return
		}
		w := watchHops(ctx, l.router, l.addr, l.hops)
		select {
		case <-lines.seen("traffic end"):
		case <-ctx.Done():
			endedFirst = true
		}
		polls, changes = w.Stop()
		now, err := dataPlaneWriters(l.hops)
		if err != nil {
			t.Error(err)
		}
		swapped = writersReplaced(before, now)
	}, "--scenario", report.ScenarioLBUpdate, "--data-plane-update", report.UpdateSurge, "--data-plane-hard-stop-after", "10s",
		"--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
	t.Logf("lb-update (surge) through FRR: %d requests, %d failed (%d by a client stall), %d long connections, %d broken",
		res.Requests, res.FailedRequests, res.RequestsLateStall, res.LongConns, res.LongConnsBroken)
	t.Logf("router next hops %v, read %d times until the traffic ended; changes: %v; zerodrop's process replaced by node %v", hops, polls, changes, swapped)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	f := res.DataPlaneUpdate
	if f == nil || len(f.Nodes) != 2 {
		t.Fatalf("want lb-update's figures over 2 nodes, got %+v", f)
	}
	if !f.Lossless() {
		t.Errorf("the update lost traffic: %s; per node %+v", f.Check(), f.Nodes)
	}
	if len(changes) > 0 || polls == 0 {
		t.Errorf("the router's next-hop set changed during the update (read %d times): %v", polls, changes)
	}
	for _, h := range hops {
		if !swapped[h] {
			t.Errorf("zerodrop's process on %s was not replaced by the update", h)
		}
	}
	if endedFirst {
		t.Errorf("the lab ended before its traffic did")
	}
}
