package scenarios

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// dataPlaneUpdater is a world whose data plane is a DaemonSet the lab can
// update (the chart's install): UpdatePlan reads its update strategy and
// the bound of an old pod's drain; UpdateDataPlane changes its pod
// template and returns each node's replacement (times in seconds since
// since) once every pod is replaced, routed, and every old pod gone.
type dataPlaneUpdater interface {
	UpdatePlan(ctx context.Context) (report.UpdateFigures, time.Duration, error)
	UpdateDataPlane(ctx context.Context, mark func(string, ...any), since time.Time, oldMayDrain bool) ([]report.NodeUpdate, error)
}

// The timed WebSockets' shape: a burst at the act's start, then one every
// bound/timedSpread (at most one a second: a short bound with a long
// update would open hundreds) while the update runs, each lifetime one of
// timedSpread steps over 0–2× the bound. With the mean lifetime the
// bound, about timedSpread of the stream plus what is left of the burst
// are open at any moment: report.MinThroughOld or more through each of 3
// nodes (the route's hash spreads them unevenly: a burst of 30 left 4 on
// one node).
const (
	timedBurst  = 45
	timedSpread = 30
	burstEvery  = 100 * time.Millisecond
)

// timedLifetimes are n lifetimes spread over (0, longest], in an order
// that mixes short and long (step k*7 mod timedSpread: 7 is prime to it).
func timedLifetimes(n int, longest time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for k := range out {
		step := (k*7)%timedSpread + 1
		out[k] = longest * time.Duration(step) / timedSpread
	}
	return out
}

// actLBUpdate is lb-update: the data plane's DaemonSet updated under the
// open-loop load, the lab's 4 WebSockets and the timed WebSockets, then
// the act waits for every timed WebSocket to end and the workload to be
// steady. It fails a negative control (strategy unavailable) that broke
// nothing; surge's own check (0 failed requests, 0 broken before the
// bound) is reported, and TestLabUpdate fails on it. With UpdateRollouts
// the workload is rolled out again and again while the update runs.
func actLBUpdate(ctx context.Context, r *run) error {
	u, ok := r.world.(dataPlaneUpdater)
	if !ok {
		return fmt.Errorf("%s needs the chart's install (--from-chart --data-plane-replicas N)", report.ScenarioLBUpdate)
	}
	fig, bound, err := u.UpdatePlan(ctx)
	if err != nil {
		return err
	}
	r.updateFigures = &fig
	longest := 2 * bound
	if r.lab.opts.TimedMax > 0 {
		longest = r.lab.opts.TimedMax
	}
	dial, addr := r.lab.net.Client.DialContext, r.addr
	var updating atomic.Bool
	updating.Store(true)
	var wg sync.WaitGroup
	var burst, stream []*traffic.TimedConn
	always := func() bool { return true }
	wg.Go(func() {
		burst = traffic.TimedWebSockets(ctx, dial, addr, timedLifetimes(timedBurst, longest), burstEvery, always)
	})
	wg.Go(func() {
		if traffic.SleepCtx(ctx, timedBurst*burstEvery) {
			stream = traffic.TimedWebSockets(ctx, dial, addr, timedLifetimes(1000, longest), max(longest/(2*timedSpread), time.Second), updating.Load)
		}
	})
	// The burst is open before the first node is touched.
	if !traffic.SleepCtx(ctx, timedBurst*burstEvery+time.Second) {
		return ctx.Err()
	}
	before := r.rec.Snapshot()
	r.mark("%s: update the data plane's DaemonSet (strategy %s, drain bound %s)", report.ScenarioLBUpdate, fig.Strategy, bound)
	var rolloutErr error
	rolled := make(chan struct{})
	go func() {
		defer close(rolled)
		if r.lab.opts.UpdateRollouts {
			fig.RolloutSeconds, rolloutErr = r.rolloutsWhile(ctx, updating.Load)
		}
	}()
	nodes, err := u.UpdateDataPlane(ctx, r.mark, r.rec.Start, r.lab.opts.UpdateEndNewReady)
	updating.Store(false)
	// The last rollout may end after the update: its failures count.
	<-rolled
	after := r.rec.Snapshot()
	r.mark("every old data-plane pod gone; waiting for the timed WebSockets to end")
	wg.Wait()
	if err != nil {
		return err
	}
	if rolloutErr != nil {
		return fmt.Errorf("a rollout during the update: %w", rolloutErr)
	}
	fig.FailedRequests = (after.Failed - after.LateStall) - (before.Failed - before.LateStall)
	fig.Nodes = nodes
	attributeWindows(fig.Nodes, after.Failures, after.Seconds)
	classifyTimed(&fig, append(burst, stream...), r.rec.Start, bound, r.hostNodes())
	r.lab.logf("%s: %s", r.name(), fig.Check())
	if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	if fig.Strategy == report.UpdateUnavailable && !fig.Broke() {
		return fmt.Errorf("the negative control (maxSurge 0, maxUnavailable 1) broke nothing: the check cannot fail as run")
	}
	return nil
}

// rolloutsWhile rolls the workload out, waits for steady, and begins
// again while more() holds: each rollout's time to steady, in seconds.
func (r *run) rolloutsWhile(ctx context.Context, more func() bool) ([]float64, error) {
	var out []float64
	for more() {
		start := time.Now()
		if err := r.rolloutRestart(ctx); err != nil {
			return out, err
		}
		if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
			return out, err
		}
		out = append(out, time.Since(start).Seconds())
		r.mark("rollout during the update steady after %.1fs", time.Since(start).Seconds())
	}
	return out, nil
}

// hostNodes maps each data-plane host's address to its Node's name.
func (r *run) hostNodes() map[string]string {
	out := map[string]string{}
	for i, h := range r.lab.net.LBs {
		out[h.IP.String()] = cluster.HostNodeName(i)
	}
	return out
}

// attributeWindows counts the failures into the window of the node being
// replaced: from its start to its end and IOTimeout more (a failed
// request shows when it ends). The DaemonSet controller starts a node's
// replacement as the previous one's new pod is ready, so windows overlap:
// a failure counts once, for the node whose window began last before it.
// The requests are counted by the second (seconds: every failure, where
// the lab keeps only the first 2,000 failure events) less the long
// connections' breaks and the requests the lab client's own stall
// started late (not the data plane's) of the same second; the long
// connections' breaks are counted from the events.
func attributeWindows(nodes []report.NodeUpdate, failures []traffic.Failure, seconds []traffic.Bucket) {
	owner := func(at float64) *report.NodeUpdate {
		var n *report.NodeUpdate
		for i := range nodes {
			w := &nodes[i]
			if at >= w.StartSeconds && at <= w.EndSeconds+traffic.IOTimeout.Seconds() && (n == nil || w.StartSeconds > n.StartSeconds) {
				n = w
			}
		}
		return n
	}
	notRequests := map[int]int{} // per second: long breaks and the client's stalls
	for _, f := range failures {
		s := int(f.At / time.Second)
		switch {
		case f.Source == "long":
			notRequests[s]++
			if n := owner(f.At.Seconds()); n != nil {
				n.BrokenLongConns++
			}
		case strings.Contains(f.Detail, "the client's timer fired late"):
			notRequests[s]++
		}
	}
	for s, b := range seconds {
		// A second counts for the window its middle is in.
		if n := owner(float64(s) + 0.5); n != nil {
			n.FailedRequests += int64(max(b.Failures-notRequests[s], 0))
		}
	}
}

// classifyTimed sorts the timed WebSockets by the node they went through
// (hosts: the data-plane hosts' addresses, the peer the pod saw) and by
// the bound of that node's old pod: one opened before the old pod began
// terminating may have gone through it (during a surge through either
// pod: it counts as the old pod's) and still open when the node's
// replacement began is through the old pod; it ended before the bound
// when its lifetime was up before the old pod's deletion plus bound. One
// whose lifetime was up before its node's replacement began is counted
// apart: the update never touched it.
func classifyTimed(f *report.UpdateFigures, conns []*traffic.TimedConn, start time.Time, bound time.Duration, hosts map[string]string) {
	byNode := map[string]*report.NodeUpdate{}
	for i := range f.Nodes {
		byNode[f.Nodes[i].Node] = &f.Nodes[i]
	}
	for _, c := range conns {
		f.WebSockets++
		node := ""
		if host, _, err := net.SplitHostPort(c.Peer); err == nil {
			node = hosts[host]
		}
		n := byNode[node]
		if n == nil || c.Opened.IsZero() {
			f.UnknownNode++
			f.UnknownNodeBroken += b2i(c.Broken)
			continue
		}
		deleted := start.Add(time.Duration(n.OldDeletedSeconds * float64(time.Second)))
		if !c.Opened.Before(deleted) {
			f.ThroughNew++
			f.ThroughNewBroken += b2i(c.Broken)
			continue
		}
		end := c.Opened.Add(c.Lifetime)
		if end.Before(start.Add(time.Duration(n.StartSeconds * float64(time.Second)))) {
			f.EndedBeforeReplacement++
			f.EndedBeforeReplacementBroken += b2i(c.Broken)
			continue
		}
		n.WebSocketsThroughOld++
		n.WebSocketsBroken += b2i(c.Broken)
		if end.Before(deleted.Add(bound)) {
			f.EndedBeforeBound++
			f.EndedBeforeBoundBroken += b2i(c.Broken)
		} else {
			f.OpenAtBound++
			f.OpenAtBoundBroken += b2i(c.Broken)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
