package scenarios

import (
	"context"
	"fmt"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// ScenarioLBReplicaRestart is issue 17's data-plane scenario.
const ScenarioLBReplicaRestart = "lb-replica-restart"

// actLBReplicaRestart: nothing changes in the workload while the data plane
// is disrupted three times, as its world does it (world.ReplicaDisruptor:
// a replica's writer restarted, a replica replaced, a replica's host
// failed); the figures of each phase are in ReplicaFigures, each
// restart's writes in writes_per_restart.
func actLBReplicaRestart(ctx context.Context, r *run) error {
	d, ok := r.world.(world.ReplicaDisruptor)
	if !ok {
		return fmt.Errorf("%s needs --data-plane-replicas 2 or more", ScenarioLBReplicaRestart)
	}
	fig := &report.ReplicaFigures{}
	r.replicaFigures = fig
	act := world.Act{
		Mark:       r.mark,
		PhaseEnd:   r.phases(ctx),
		WaitSteady: func(ctx context.Context) error { return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)) },
		Steady: func(ctx context.Context, v world.View) (bool, string) {
			return r.backendsSteady(ctx, v, replicas)
		},
		RestartWrites: func(n int64) { r.restartWrites = append(r.restartWrites, n) },
	}
	return d.DisruptReplicas(ctx, act, fig)
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
		// A request the client's own timer started late (a stall of the
		// lab's process on a loaded machine, traffic.LateStall) is not the
		// data plane's: the run's totals report it apart, and so does a
		// phase.
		failed := (now.Failed - now.LateStall) - (phase.Failed - phase.LateStall)
		broken := now.LongBroken - phase.LongBroken
		phase = now
		return failed, broken, nil
	}
}
