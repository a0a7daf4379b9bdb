package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
		if err := r.killAtFirstWrite(ctx, leader, churned, a); err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		t0, puts0 := time.Now(), r.emu.Counters().Puts()
		if _, err := r.start(true); err != nil {
			return err
		}
		if err := r.waitNewLeader(ctx, leader); err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		r.settle(ctx)
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		res.WritesPerRestart = append(res.WritesPerRestart, int64(r.emu.Counters().Puts()-puts0))
	}
	return nil
}

// killAtFirstWrite replaces one endpoint of a churned Service every 250 ms,
// so that the leader plans, until the emulator has the leader's first write,
// from inside which it kills the leader.
func (r *azureRun) killAtFirstWrite(ctx context.Context, leader *azureInstance, churned []*azureSvc, a *AzureFigures) error {
	fired := make(chan struct{})
	var once sync.Once
	r.emu.OnWrite(func() {
		once.Do(func() {
			leader.kill()
			close(fired)
		})
	})
	defer r.emu.OnWrite(nil)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(r.waitLimit())
	for n := 0; ; n++ {
		select {
		case <-fired:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-limit:
			return fmt.Errorf("the leader wrote nothing within %s", r.waitLimit())
		case <-tick.C:
			svc := churned[n%len(churned)]
			svc.replaceOne()
			if err := svc.pushEndpoints(ctx, r.c, r.ns); err != nil {
				return err
			}
			a.Changes++
		}
	}
}

// kill cancels the instance without waiting for its manager, its lease left
// held (see azureRun.noRelease): it leads no more.
func (in *azureInstance) kill() {
	in.stopped.Store(true)
	in.cancel()
}
