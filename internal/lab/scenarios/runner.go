package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/ctrlmetrics"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
)

// settle is the warm-up and cool-down around the disruption.
const settle = 2 * time.Second

// actTimeout bounds how long a scenario's act may take before it counts as
// failed: the workload's steady-state bound plus 30 s, and for restart-idle
// 40 s per restart (a lease to expire, a replacement to start, idleVerify;
// where the world's writers come back slower, its world.SlowRestarts).
func (r *run) actTimeout(sc scenario) time.Duration {
	d := r.steadyTimeout(max(sc.replicas, 4)) + 30*time.Second
	slow, _ := r.world.(world.SlowRestarts)
	switch sc.Name {
	case scenarioRestartIdle, scenarioMaintenance:
		per := 40 * time.Second
		if slow != nil {
			per = slow.IdleRestart()
		}
		d += time.Duration(r.lab.opts.idleRestarts()) * per
		if sc.Name == scenarioMaintenance {
			d += r.lab.opts.maintenanceWait()
		}
	case report.ScenarioKillMidPlan:
		// A lease to expire, a replacement to start, a rollout to resume.
		kills := r.lab.midPlanKills()
		d += time.Duration(kills) * 60 * time.Second
		if slow != nil {
			d += slow.KillsBackoff(kills)
		}
	case report.ScenarioAPIServerDown:
		d += r.lab.opts.Chaos.outage() + 90*time.Second
	case ScenarioLBReplicaRestart:
		// Its DaemonSet update (the chart's install) replaces one replica at
		// a time, and each old pod may drain for its grace period (the
		// chart's 60 s: its HAProxy stops softly and finishes the
		// connections it holds) before the next one is replaced.
		if dp, ok := r.world.(world.DataPlane); ok {
			d += time.Duration(dp.Replicas()) * 90 * time.Second
		}
	case report.ScenarioLBUpdate:
		// Each node's old pod may drain for its grace period (the chart's
		// 60 s), and the timed WebSockets live up to twice that after the
		// last one opens.
		d += 8 * time.Minute
	}
	return d
}

// runScenario runs one scenario in one mode, backend and traffic policy,
// and reports what the clients saw.
func (l *lab) runScenario(ctx context.Context, sc scenario, v variant, mode report.Mode) (report.Result, error) {
	l.runs++
	r := &run{lab: l, id: l.runs, scenario: sc.Name, mode: mode, backend: v.backend, policy: v.policy, taintedAddrs: map[string]bool{},
		ns:    fmt.Sprintf("lab-%d-%s-%s", l.runs, sc.Name, mode),
		class: fmt.Sprintf("zerodrop.dev/lab-%d", l.runs),
		dir:   fmt.Sprintf("%s/haproxy-%d", l.dir, l.runs)}
	r.world = l.opts.World.NewRun(world.Env{ID: r.id, Mode: mode, NS: r.ns, Key: r.key(), Class: r.class, Name: r.name(), Dir: r.dir, LabDir: l.dir,
		Listener: model.ListenerName(r.ns, appName, corev1.ProtocolTCP, servicePort),
		CP:       l.cp, Net: l.net, Logf: l.logf, Progressf: l.progressf, Mark: r.mark,
		WaitLeader: r.waitLeader, Gone: func(name string) { r.ctrls.gone(name) }})
	l.curMu.Lock()
	l.current = r
	l.curMu.Unlock()
	res := report.Result{Scenario: sc.Name, Mode: string(mode), Backend: v.backend, ExternalTrafficPolicy: v.policy}
	grace := time.Duration(*r.deployment(sc.replicas).Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	res.AzureClock = l.opts.World.Clock(mode, grace)
	defer r.teardown()
	label := fmt.Sprintf("%-10s %-13s %-8s", sc.Name, v, mode)
	l.progressf("%s setting up (%s)", label, sc.about)
	setupStart := time.Now()
	if err := r.setup(ctx, sc.replicas); err != nil {
		return res, err
	}
	l.logf("%s: steady after %s", r.name(), time.Since(setupStart).Round(time.Millisecond))

	measurer, _ := r.world.(world.Measurer)
	if measurer != nil {
		if err := measurer.ActStart(ctx); err != nil {
			return res, err
		}
	}
	base := r.ctrls.counters()
	landedBase, err := r.world.Writes()
	if err != nil {
		return res, err
	}
	r.rec = traffic.NewRecorder()
	tctx, stopTraffic := context.WithCancel(ctx)
	res.Frontend, res.TrafficStart, res.ClientNetns = r.addr, report.Timestamp(r.rec.Start), l.net.Client.Name
	// An outside client can count too, from the same namespace: the
	// frontend is where the lab's clients send to.
	l.progressf("%s traffic start frontend=%s netns=%s rate=%d/s", label, r.addr, l.net.Client.Name, l.opts.Rate)
	trafficDone := r.runTraffic(tctx, landedBase)
	outsideDone := r.startOutside(tctx)

	if traffic.SleepCtx(ctx, settle) {
		actx, cancel := context.WithTimeout(ctx, r.actTimeout(sc))
		actStart := time.Now()
		err = sc.act(actx, r)
		cancel()
		if err == nil {
			res.RolloutSeconds = float64(time.Since(actStart).Milliseconds()) / 1000
			r.mark("steady")
			traffic.SleepCtx(ctx, settle)
		}
	}
	// The schedule ends here (requests in flight still finish and count):
	// an outside client stops its own schedule at this line.
	l.progressf("%s traffic end", label)
	stopTraffic()
	lanes := trafficDone()
	res.TrafficEnd = report.Timestamp(time.Now())
	if dp := r.dataPlane(); dp != nil {
		res.DataPlaneSessions = dp.Sessions()
	}
	if err == nil {
		err = ctx.Err()
	}
	snap := r.rec.Snapshot()
	lerr := r.figures(&res, snap, base, landedBase, lanes)
	outsideDone(&res)
	if err == nil {
		err = lerr
	}
	if measurer != nil {
		if merr := measurer.ActEnd(context.WithoutCancel(ctx), &res); err == nil {
			err = merr
		}
	}
	l.logFailures(r, snap)
	if err == nil && sc.lossless && mode == report.ModeZerodrop {
		err = lossless(res)
	}
	return res, err
}

// runTraffic runs the clients, the progress lines and the backend state
// sampler until tctx ends; the function it returns waits for them all and
// returns the sampled lanes.
func (r *run) runTraffic(tctx context.Context, landedBase int64) (wait func() []report.BackendLane) {
	var wg sync.WaitGroup
	var lanes []report.BackendLane
	wg.Go(func() { traffic.RunTraffic(tctx, r.lab.net.Client.DialContext, r.addr, r.lab.opts.Rate, r.rec) })
	wg.Go(func() { r.lab.progress(tctx, r, landedBase) })
	wg.Go(func() { lanes = r.sampleStates(tctx, r.rec.Start) })
	return func() []report.BackendLane {
		wg.Wait()
		return lanes
	}
}

// figures fills res with what the clients saw (snap), what the controllers
// say they wrote since base, and what landed at HAProxy's sockets since
// landedBase; the error is the sockets' (a proxy bypassed).
func (r *run) figures(res *report.Result, snap traffic.Snapshot, base ctrlmetrics.Counters, landedBase int64, lanes []report.BackendLane) error {
	l := r.lab
	c := r.ctrls.counters().Sub(base)
	res.Requests, res.FailedRequests, res.RequestsLate = snap.Requests, snap.Failed, snap.Late
	res.RequestsLateStall = snap.LateStall
	res.LongConns, res.LongConnsClosed, res.LongConnsBroken = snap.LongConns, snap.LongClosed, snap.LongBroken
	p50, longest := snap.ReconnectStats()
	res.ReconnectP50Ms, res.ReconnectMaxMs = report.Milliseconds(p50), report.Milliseconds(longest)
	res.ControllerWrites, res.ProviderConflicts = int64(c.Writes), int64(c.Conflicts)
	res.DrainDrained, res.DrainDeadline = int64(c.Drained), int64(c.Deadline)
	res.HookFailures = l.hookFailures(r.ns)
	res.DrainRelayRetries = l.relayRetries(r.ns)
	res.WritesPerRestart = r.restartWrites
	res.FailedPerRestart, res.BrokenPerRestart = r.restartFailed, r.restartBroken
	res.Maintenance = r.maintenance
	if dp := r.dataPlane(); dp != nil {
		res.DataPlaneReplicas = dp.Replicas()
	}
	res.ReplicaDisruption = r.replicaFigures
	res.DataPlaneUpdate = r.updateFigures
	res.Chaos = r.chaos
	res.DuplicateBackendSamples = r.dupSamples.Load()
	landed, lerr := r.world.Writes()
	res.ProviderWrites = landed - landedBase
	res.DurationSeconds = float64(time.Since(r.rec.Start).Milliseconds()) / 1000
	res.Timeline = &report.Timeline{Seconds: snap.Seconds, Failures: snap.Failures, Markers: r.markers,
		LongClosed: snap.LongClosed, Exchanges: snap.Exchanges, Lanes: lanes}
	return lerr
}

func (l *lab) logFailures(r *run, snap traffic.Snapshot) {
	kinds := map[string]int{}
	for _, f := range snap.Failures {
		kinds[f.Source+"/"+f.Kind]++
	}
	b, _ := json.Marshal(kinds)
	p50, longest := snap.ReconnectStats()
	l.logf("%s: %d requests, %d failed (%d late, %d of them the client's stall), %d long conns (%d broken, %d closed with 1001, %d echoed messages, %d reconnects: p50 %s, max %s), failures by kind %s",
		r.name(), snap.Requests, snap.Failed, snap.Late, snap.LateStall, snap.LongConns, snap.LongBroken, snap.LongClosed, snap.Exchanges,
		len(snap.Reconnects), p50.Round(time.Millisecond), longest.Round(time.Millisecond), b)
	for _, f := range snap.Failures {
		l.logf("  %6.2fs %-7s %-7s %s", f.At.Seconds(), f.Source, f.Kind, f.Detail)
	}
}

// progress prints a line every 5 s while the traffic runs; writes are those
// counted at HAProxy's sockets.
func (l *lab) progress(ctx context.Context, r *run, landedBase int64) {
	for traffic.SleepCtx(ctx, 5*time.Second) {
		s := r.rec.Snapshot()
		landed, _ := r.world.Writes()
		l.progressf("%-10s %-13s %-8s %4.0fs  requests %5d  failed %4d (late %d)  long %3d (closed %d, broken %d)  writes %d",
			r.scenario, r.backend+"/"+r.policy, r.mode, time.Since(r.rec.Start).Seconds(), s.Requests, s.Failed, s.Late, s.LongConns,
			s.LongClosed, s.LongBroken, landed-landedBase)
	}
}
