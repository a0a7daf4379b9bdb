package scenarios

import (
	"context"
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// DefaultRestarts is how often the restart scenario restarts the
// controller, in every world.
const DefaultRestarts = 3

// actRestart restarts the controller DefaultRestarts times during a
// rollout: its pod deleted, and 2 s after its replacement is ready the
// next one.
func actRestart(ctx context.Context, r *run) error {
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	for range DefaultRestarts {
		if !traffic.SleepCtx(ctx, 2*time.Second) {
			return ctx.Err()
		}
		if err := r.restartController(ctx); err != nil {
			return err
		}
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// scenarioRestartIdle is the Azure incident: the writer restarted while
// nothing changes.
const scenarioRestartIdle = "restart-idle"

// DefaultIdleRestarts is how often restart-idle restarts the writer (the
// incident's count; Options.IdleRestarts); idleVerify how long it then lets
// the new writer work before the next restart (its first sync of every
// Service takes well under that).
const (
	DefaultIdleRestarts = 6
	idleVerify          = world.IdleVerify
)

// idleRestarts is restart-idle's count of restarts.
func (o Options) idleRestarts() int {
	if o.IdleRestarts > 0 {
		return o.IdleRestarts
	}
	return DefaultIdleRestarts
}

// actRestartIdle is restart-idle (docs/lab.md's table of scenarios): the
// writer stopped idleRestarts times (world.IdleStop), each time followed
// by idleVerify once another process leads; every write counted from one
// stop to the next (the last: to the end of the act) is that restart's.
// The writer is the world's where the world runs it (restartIdleWorld:
// emulated Azure's CCM, the chart's processes), or the leading controller
// pod (restartIdlePod).
func actRestartIdle(ctx context.Context, r *run) error {
	once := r.restartIdlePod
	if w, ok := r.world.(world.WriterRestarter); ok && w.RestartsWriter() {
		once = func(ctx context.Context, i int) (int64, error) { return r.restartIdleWorld(ctx, w, i) }
	}
	var at, failed, broken []int64
	for i := range r.lab.opts.idleRestarts() {
		s := r.rec.Snapshot()
		failed, broken = append(failed, s.Failed), append(broken, s.LongBroken)
		n, err := once(ctx, i)
		if err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		at = append(at, n)
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
	}
	n, err := r.world.Writes()
	if err != nil {
		return err
	}
	at = append(at, n)
	r.restartWrites = writesBetween(at)
	err = r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
	s := r.rec.Snapshot()
	r.restartFailed, r.restartBroken = writesBetween(append(failed, s.Failed)), writesBetween(append(broken, s.LongBroken))
	return err
}

// restartIdlePod is restart i of restart-idle on the leading controller
// pod: it waits for a leader, signals it, and waits until another pod
// leads and the controllers are ready; it returns the writes landed when
// the signal was sent.
func (r *run) restartIdlePod(ctx context.Context, i int) (int64, error) {
	sig, name := world.IdleStop(i)
	target, err := r.waitLeader(ctx, "")
	if err != nil {
		return 0, err
	}
	at, err := r.world.Writes()
	if err != nil {
		return 0, err
	}
	r.mark("%s %s", name, world.ShortPod(target))
	r.stopping(i, name)
	if err := r.lab.agent.Signal(ctrlNamespace+"/"+target, sig); err != nil {
		return 0, err
	}
	r.ctrls.gone(target)
	if o, ok := r.world.(world.Outage); ok {
		if err := o.DuringOutage(ctx, i); err != nil {
			return 0, err
		}
	}
	next, err := r.waitLeader(ctx, target)
	if err != nil {
		return 0, err
	}
	r.mark("leader %s", world.ShortPod(next))
	return at, r.waitControllersReady(ctx, target)
}

// restartIdleWorld is restart i of restart-idle with the world's own
// writer (on emulated Azure the CCM): the world waits for a leader, kills
// it, starts its replacement, and waits until another process leads; it
// returns the writes landed at the kill.
func (r *run) restartIdleWorld(ctx context.Context, w world.WriterRestarter, i int) (at int64, err error) {
	sig, name := world.IdleStop(i)
	var landedErr error
	if err := w.RestartWriter(ctx, sig, func(leader string) {
		at, landedErr = r.world.Writes()
		r.mark("%s %s", name, leader)
		r.stopping(i, name)
	}); err != nil {
		return 0, err
	}
	return at, landedErr
}

// writesBetween turns the landed-write counts (or the failures) read at
// each restart (and once at the end) into the writes of each restart.
func writesBetween(at []int64) []int64 {
	var out []int64
	for i := 1; i < len(at); i++ {
		out = append(out, at[i]-at[i-1])
	}
	return out
}
