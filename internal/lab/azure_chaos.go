package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/metrics"
)

// azureKillMidPlan is the emulator lab's kill-mid-plan: the writer (the
// leader) stopped at the first write of a plan, Chaos.MidPlanKills times.
// The controllers run in the lab process, so the stop is not a SIGKILL: the
// emulator calls back from inside the leader's first PUT once it has landed
// (emulator.Emulator.OnWrite), and the callback cancels that controller's
// context with its lease left held (this run's managers do not release it on
// cancel), so its plan goes no further and the standby takes over only when
// the lease expires, as after a kill. A replacement starts, as a ReplicaSet's
// would. Each kill counts until a new leader has verified every load
// balancer and they hold exactly what the Services ask for; the PUTs from
// the kill to then are that restart's.
func (r *azureRun) killMidPlan(ctx context.Context, a *AzureFigures, res *Result) error {
	churned := r.svcs[:max(1, len(r.svcs)/2)]
	for i := 0; i < r.opts.Kills; i++ {
		leader := r.leader()
		if leader == nil {
			return errors.New("no leader to kill")
		}
		fired := make(chan struct{})
		var once sync.Once
		r.emu.OnWrite(func() {
			once.Do(func() {
				leader.kill()
				close(fired)
			})
		})
		// Endpoint changes make the plans: one endpoint of a churned Service
		// replaced every 250 ms until the leader has written.
		tick := time.NewTicker(250 * time.Millisecond)
		limit := time.After(r.waitLimit())
		for n := 0; ; n++ {
			select {
			case <-fired:
			case <-ctx.Done():
				tick.Stop()
				r.emu.OnWrite(nil)
				return ctx.Err()
			case <-limit:
				tick.Stop()
				r.emu.OnWrite(nil)
				return fmt.Errorf("kill %d: the leader wrote nothing within %s", i+1, r.waitLimit())
			case <-tick.C:
				svc := churned[n%len(churned)]
				svc.replaceOne()
				if err := svc.pushEndpoints(ctx, r.c, r.ns); err != nil {
					tick.Stop()
					r.emu.OnWrite(nil)
					return err
				}
				a.Changes++
				continue
			}
			break
		}
		tick.Stop()
		r.emu.OnWrite(nil)
		t0, puts0 := time.Now(), r.emu.Counters().Puts()
		if _, err := r.start(true); err != nil {
			return err
		}
		err := r.wait(ctx, "a new leader verifies every load balancer", func() string {
			l := r.leader()
			if l == nil || l == leader {
				return "no new leader yet"
			}
			if n := metrics.Sum(l.metrics.Reconciles); n < float64(len(azureLBNames)) {
				return fmt.Sprintf("the new leader reconciled %v load balancers", n)
			}
			return azureConverged(r.emu, azureGroup, r.ns, r.svcs)
		})
		if err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		r.settle(ctx)
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		res.WritesPerRestart = append(res.WritesPerRestart, int64(r.emu.Counters().Puts()-puts0))
	}
	return nil
}

// kill cancels the instance without waiting for its manager, its lease left
// held (see azureRun.noRelease): it leads no more.
func (in *azureInstance) kill() {
	in.stopped.Store(true)
	in.cancel()
}
