package replicas

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// DisruptReplicas is lb-replica-restart on the lab's replicas, its three
// phases as docs/lab.md's table of scenarios describes them: (1) replica
// 0's zerodrop process restarted (SIGKILL, then SIGTERM) while its HAProxy
// serves, each restart's writes recorded; (2) replica 1 replaced as a
// DaemonSet update without surge would, its route staying (the route
// follows the node, which stays: dataplane's routes.go); (3) replica 1
// failed hard, as its node would, its route withdrawn as BFD would.
// fig gets each phase's figures; what (2) and (3) cost is measured, not
// asserted.
func (r *run) DisruptReplicas(ctx context.Context, act world.Act, fig *report.ReplicaFigures) error {
	reps := r.Plane.Replicas()
	if len(reps) < 2 {
		return fmt.Errorf("lb-replica-restart needs --data-plane-replicas 2 or more")
	}
	net := r.w.Lab.Net
	fig.HardDetectSeconds = dataplane.HardDetect.Seconds()
	if err := r.restartFirstReplicaProcess(ctx, act, reps[0]); err != nil {
		return err
	}
	var err error
	if fig.RestartFailed, fig.RestartBroken, err = act.PhaseEnd(); err != nil {
		return err
	}

	old := reps[1]
	if err := r.Plane.StopReplica(ctx, old); err != nil {
		return fmt.Errorf("stop replica 1: %w", err)
	}
	act.Mark("replica 1: stopped, its route stays")
	if err := r.replaceReplica(ctx, act, old, reps); err != nil {
		return err
	}
	if fig.ReplaceFailed, fig.ReplaceBroken, err = act.PhaseEnd(); err != nil {
		return err
	}

	old = r.Plane.Replicas()[1]
	act.Mark("replica 1: HAProxy and zerodrop SIGKILLed")
	if p, _ := old.ProcessRun(); p != nil {
		p.Signal(syscall.SIGKILL)
	}
	cluster.KillByArg(filepath.Join(old.Dir(), "haproxy.cfg"))
	if !traffic.SleepCtx(ctx, dataplane.HardDetect) {
		return ctx.Err()
	}
	act.Mark("replica 1: route withdrawn, Pod gone")
	if err := net.RouteTo(ctx, false, dataplane.OtherMembers(r.Plane.Replicas(), old)...); err != nil {
		return err
	}
	r.Plane.DropReplica(old)
	if err := r.Plane.StopReplica(ctx, old); err != nil {
		r.Env.Logf("%s: after the hard failure: %v", r.Env.Name, err)
	}
	if err := act.WaitSteady(ctx); err != nil {
		return err
	}
	if err := r.replaceReplica(ctx, act, old, r.Plane.Replicas()); err != nil {
		return err
	}
	fig.HardFailed, fig.HardBroken, err = act.PhaseEnd()
	return err
}

// restartFirstReplicaProcess is phase (1): d's (replica 0's) zerodrop
// process ended by SIGKILL, then by SIGTERM, and started again each time,
// its HAProxy serving throughout; each restart's writes are recorded.
func (r *run) restartFirstReplicaProcess(ctx context.Context, act world.Act, d *dataplane.Replica) error {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.Landed()
		p, _ := d.ProcessRun()
		act.Mark("replica 0: %s its zerodrop process", sig)
		p.Signal(sig)
		if err := r.startAgain(ctx, d, p); err != nil {
			return fmt.Errorf("after %s: %w", sig, err)
		}
		act.Mark("replica 0: zerodrop process ready")
		if !traffic.SleepCtx(ctx, world.IdleVerify) {
			return ctx.Err()
		}
		act.RestartWrites(d.Landed() - before)
	}
	return nil
}

// replaceReplica starts a new pod for old's replica, waits until it serves
// the Service, makes it the run's, and announces its route.
func (r *run) replaceReplica(ctx context.Context, act world.Act, old *dataplane.Replica, reps []*dataplane.Replica) error {
	d := old.Replacement()
	err := r.Plane.StartReplica(ctx, d)
	r.Plane.SetReplica(d)
	if err != nil {
		return fmt.Errorf("new replica %d: %w", d.Index(), err)
	}
	if err := traffic.WaitFor(ctx, 60*time.Second, fmt.Sprintf("the new replica %d to serve the Service", d.Index()), func() (bool, string) {
		return act.Steady(ctx, dataplane.View(d, r.Env.Key))
	}); err != nil {
		return err
	}
	act.Mark("replica %d: new pod serves, route announced (again after a failure)", d.Index())
	members := append(dataplane.OtherMembers(reps, d), d.Index())
	slices.Sort(members)
	return r.w.Lab.Net.RouteTo(ctx, false, members...)
}

// MidPlanWriter is kill-mid-plan's writer: a replica's own zerodrop
// process, the replicas in turn. After the kill it is started again at
// once (the kubelet restarts its container) while its HAProxy serves on,
// and the lab waits until it is ready.
func (r *run) MidPlanWriter(_ context.Context, kills int) (world.Writer, error) {
	reps := r.Plane.Replicas()
	d := reps[kills%len(reps)]
	p, _ := d.ProcessRun()
	return world.Writer{
		Name:    fmt.Sprintf("replica %d's zerodrop process", d.Index()),
		OnWrite: func(f func(string)) { sockcount.OnWriteAll(d.Socks(), f) },
		Kill:    func() { p.Signal(syscall.SIGKILL) },
		Recover: func(ctx context.Context) error {
			if err := r.startAgain(ctx, d, p); err != nil {
				return err
			}
			r.Env.Mark("replica %d: zerodrop process ready", d.Index())
			return nil
		},
	}, nil
}

// startAgain waits (30 s at most) until p, d's zerodrop process, has ended,
// and starts d's next one, its HAProxy serving throughout.
func (r *run) startAgain(ctx context.Context, d *dataplane.Replica, p *netlab.Process) error {
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		return fmt.Errorf("replica %d's zerodrop process did not end", d.Index())
	}
	return r.Plane.StartProcess(ctx, d)
}
