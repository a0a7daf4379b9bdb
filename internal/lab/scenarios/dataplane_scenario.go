package scenarios

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios/dataplane"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// scenarioLBReplicaRestart is issue 17's data-plane scenario.
const ScenarioLBReplicaRestart = "lb-replica-restart"

// hardDetect is how long a hard-failed replica's route stays announced: as
// BFD with a 1 s interval and a multiplier of 3 would take to withdraw it.
const hardDetect = 3 * time.Second

// actLBReplicaRestart: nothing changes in the workload while the data plane
// is disrupted three times; the figures of each phase are in
// ReplicaFigures. (1) Replica 0's zerodrop process is restarted, SIGKILL and
// then SIGTERM, as a crash or an upgrade of its container does, while its
// HAProxy serves on: each restart's writes counted at that HAProxy's sockets
// go to writes_per_restart (nothing changed: 0 expected). (2) Replica 1 is
// replaced as a DaemonSet update replaces its pod: its route is withdrawn
// (its flows move to the other replica, which has no state for the
// established ones), it is stopped and its Pod deleted; a new replica starts
// from an empty state directory, builds its HAProxy from the Services, and
// its route is announced again. (3) Replica 1 fails hard, as its node does:
// HAProxy and zerodrop SIGKILLed, its route withdrawn hardDetect later, its
// Pod deleted (standing for the node's Lease expiring, which ends its
// counting); then a new replica comes up and is announced. What (2) and (3)
// cost is measured, not asserted.
func actLBReplicaRestart(ctx context.Context, r *run) error {
	if r.fromChart() {
		return actLBReplicaRestartChart(ctx, r)
	}
	reps := r.replicas()
	if len(reps) < 2 {
		return fmt.Errorf("%s needs --data-plane-replicas 2 or more", ScenarioLBReplicaRestart)
	}
	fig := &report.ReplicaFigures{HardDetectSeconds: hardDetect.Seconds()}
	r.replicaFigures = fig
	phaseEnd := r.phases(ctx)

	if err := r.restartFirstReplicaProcess(ctx, reps[0]); err != nil {
		return err
	}
	var err error
	if fig.RestartFailed, fig.RestartBroken, err = phaseEnd(); err != nil {
		return err
	}

	old := reps[1]
	others := otherMembers(reps, old)
	r.mark("replica 1: route withdrawn")
	if err := r.lab.net.RouteTo(ctx, false, others...); err != nil {
		return err
	}
	if !traffic.SleepCtx(ctx, dataplane.WithdrawSettle) {
		return ctx.Err()
	}
	if err := r.dp.StopReplica(ctx, old); err != nil {
		return fmt.Errorf("stop replica 1: %w", err)
	}
	r.mark("replica 1: stopped")
	if err := r.replaceReplica(ctx, old, reps); err != nil {
		return err
	}
	if fig.ReplaceFailed, fig.ReplaceBroken, err = phaseEnd(); err != nil {
		return err
	}

	old = r.replicas()[1]
	r.mark("replica 1: HAProxy and zerodrop SIGKILLed")
	if p := old.Process(); p != nil {
		p.Signal(syscall.SIGKILL)
	}
	cluster.KillByArg(filepath.Join(old.Dir(), "haproxy.cfg"))
	if !traffic.SleepCtx(ctx, hardDetect) {
		return ctx.Err()
	}
	r.mark("replica 1: route withdrawn, Pod gone")
	if err := r.lab.net.RouteTo(ctx, false, otherMembers(r.replicas(), old)...); err != nil {
		return err
	}
	r.dp.DropReplica(old)
	if err := r.dp.StopReplica(ctx, old); err != nil {
		r.lab.logf("%s: after the hard failure: %v", r.name(), err)
	}
	if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	if err := r.replaceReplica(ctx, old, r.replicas()); err != nil {
		return err
	}
	fig.HardFailed, fig.HardBroken, err = phaseEnd()
	return err
}

// restartFirstReplicaProcess is phase (1): d's (replica 0's) zerodrop
// process ended by SIGKILL, then by SIGTERM, and started again each time,
// its HAProxy serving throughout; each restart's writes go to
// restartWrites.
func (r *run) restartFirstReplicaProcess(ctx context.Context, d *dataplane.Replica) error {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.Landed()
		p := d.Process()
		r.mark("replica 0: %s its zerodrop process", sig)
		p.Signal(sig)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			return fmt.Errorf("replica 0's zerodrop process did not end after %s", sig)
		}
		if err := r.dp.StartProcess(ctx, d); err != nil {
			return err
		}
		r.mark("replica 0: zerodrop process ready")
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
		r.restartWrites = append(r.restartWrites, d.Landed()-before)
	}
	return nil
}

// phases returns lb-replica-restart's phase end: it waits until the
// workload is steady and returns the requests that failed and the long
// connections that broke since the previous phase's end (or now).
func (r *run) phases(ctx context.Context) func() (failed, broken int64, err error) {
	phase := r.rec.Snapshot()
	return func() (int64, int64, error) {
		if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
			return 0, 0, err
		}
		now := r.rec.Snapshot()
		failed, broken := now.Failed-phase.Failed, now.LongBroken-phase.LongBroken
		phase = now
		return failed, broken, nil
	}
}

// otherMembers are the route members of reps but d.
func otherMembers(reps []*dataplane.Replica, d *dataplane.Replica) []int {
	var out []int
	for _, o := range reps {
		if o.Index() != d.Index() {
			out = append(out, o.Index())
		}
	}
	return out
}

// replaceReplica starts a new pod for old's replica, waits until it serves
// the Service, makes it the run's, and announces its route.
func (r *run) replaceReplica(ctx context.Context, old *dataplane.Replica, reps []*dataplane.Replica) error {
	d := old.Replacement()
	err := r.dp.StartReplica(ctx, d)
	r.dp.SetReplica(d)
	if err != nil {
		return fmt.Errorf("new replica %d: %w", d.Index(), err)
	}
	if err := traffic.WaitFor(ctx, 60*time.Second, fmt.Sprintf("the new replica %d to serve the Service", d.Index()), func() (bool, string) {
		return r.backendsSteady(ctx, view{strconv.Itoa(d.Index()), d.Provider()}, replicas)
	}); err != nil {
		return err
	}
	r.mark("replica %d: new pod serves, route announced", d.Index())
	members := append(otherMembers(reps, d), d.Index())
	slices.Sort(members)
	return r.lab.net.RouteTo(ctx, false, members...)
}
