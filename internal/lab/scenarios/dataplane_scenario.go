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
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// scenarioLBReplicaRestart is issue 17's data-plane scenario.
const ScenarioLBReplicaRestart = "lb-replica-restart"

// withdrawSettle is how long the lab waits between withdrawing a replica's
// route and stopping it: a router's convergence is not instant either, and
// a connection being opened through the replica at the withdrawal completes.
const withdrawSettle = time.Second

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
	if !traffic.SleepCtx(ctx, withdrawSettle) {
		return ctx.Err()
	}
	if err := r.stopReplica(ctx, old); err != nil {
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
	if p := old.process(); p != nil {
		p.Signal(syscall.SIGKILL)
	}
	cluster.KillByArg(filepath.Join(old.dir, "haproxy.cfg"))
	if !traffic.SleepCtx(ctx, hardDetect) {
		return ctx.Err()
	}
	r.mark("replica 1: route withdrawn, Pod gone")
	if err := r.lab.net.RouteTo(ctx, false, otherMembers(r.replicas(), old)...); err != nil {
		return err
	}
	r.dropReplica(old)
	if err := r.stopReplica(ctx, old); err != nil {
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
func (r *run) restartFirstReplicaProcess(ctx context.Context, d *dpReplica) error {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.landed()
		p := d.process()
		r.mark("replica 0: %s its zerodrop process", sig)
		p.Signal(sig)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			return fmt.Errorf("replica 0's zerodrop process did not end after %s", sig)
		}
		if err := r.startReplicaProcess(ctx, d); err != nil {
			return err
		}
		r.mark("replica 0: zerodrop process ready")
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
		r.restartWrites = append(r.restartWrites, d.landed()-before)
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
func otherMembers(reps []*dpReplica, d *dpReplica) []int {
	var out []int
	for _, o := range reps {
		if o.index != d.index {
			out = append(out, o.index)
		}
	}
	return out
}

// replaceReplica starts a new pod for old's replica, waits until it serves
// the Service, makes it the run's, and announces its route.
func (r *run) replaceReplica(ctx context.Context, old *dpReplica, reps []*dpReplica) error {
	d := &dpReplica{index: old.index, gen: old.gen + 1, host: old.host}
	err := r.startReplica(ctx, d)
	r.setReplica(d)
	if err != nil {
		return fmt.Errorf("new replica %d: %w", d.index, err)
	}
	if err := waitFor(ctx, 60*time.Second, fmt.Sprintf("the new replica %d to serve the Service", d.index), func() (bool, string) {
		return r.backendsSteady(ctx, view{strconv.Itoa(d.index), d.prov}, replicas)
	}); err != nil {
		return err
	}
	r.mark("replica %d: new pod serves, route announced", d.index)
	members := append(otherMembers(reps, d), d.index)
	slices.Sort(members)
	return r.lab.net.RouteTo(ctx, false, members...)
}

// dataPlaneSessions reads, for each replica running at the end, how many
// connections its HAProxy's frontends accepted (show stat, FRONTEND rows,
// stot): that the client's route spread the traffic over them. A replica
// replaced during the run counts from its replacement's start.
func (r *run) dataPlaneSessions() []int64 {
	var out []int64
	for _, d := range r.replicas() {
		n, err := frontendSessions(filepath.Join(d.dir, "admin.sock"))
		if err != nil {
			r.lab.logf("%s: sessions of replica %d: %v", r.name(), d.index, err)
			n = -1
		}
		out = append(out, n)
	}
	return out
}

// frontendSessions sums stot over the FRONTEND rows of `show stat` at the
// admin socket, read through the provider's one reader of it.
func frontendSessions(sock string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := haproxy.ReadStat(ctx, sock)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, r := range rows {
		if r.IsFrontend() {
			sum += r.Sessions
		}
	}
	return sum, nil
}
