package azurewrites

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// azureKillMidPlan is the emulator lab's kill-mid-plan: the writer (the
// leader) SIGKILLed at the first write of a plan, Chaos.MidPlanKills times.
// The controllers are processes of their own here (azure_process.go); the
// emulator calls back from inside the leader's first PUT once it has landed
// (emulator.Emulator.OnWrite), before its answer goes back, and the
// callback SIGKILLs that process: its plan goes no further, its lease stays
// held, and the standby takes over when the lease expires. A replacement
// starts, as a ReplicaSet's would. Each kill counts until a new leader has
// verified every load balancer and they hold exactly what the Services ask
// for; the PUTs from the kill to then are that restart's.
func (r *azureRun) killMidPlan(ctx context.Context, a *report.AzureFigures, res *report.Result) error {
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
		// What the new leader's diff will call for: the state once every
		// write the killed one sent has landed (its lease, still held, keeps
		// any other writer out meanwhile).
		if err := r.waitKilledWritesLanded(ctx, leader); err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		lo, hi, err := azureWriteBounds(r.emu, azureGroup, r.ns, r.svcs)
		if err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		writes0 := r.emu.Counters().Writes
		if err := r.waitNewLeader(ctx, leader); err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		r.settle(ctx)
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		res.WritesPerRestart = append(res.WritesPerRestart, int64(r.emu.Counters().Puts()-puts0))
		landed := r.emu.Counters().Writes - writes0
		a.WritesLanded = append(a.WritesLanded, landed)
		a.WritesCalledFor = append(a.WritesCalledFor, [2]int{lo, hi})
		r.progress("%s: kill %d: %d PUTs, %d writes landed, the diff at takeover called for %d to %d",
			r.ns, i+1, res.WritesPerRestart[i], landed, lo, hi)
		if landed < lo || landed > hi {
			return fmt.Errorf("kill %d: the new leader's writes changed the load balancers %d times; the diff at its takeover called for %d to %d",
				i+1, landed, lo, hi)
		}
	}
	return nil
}

// waitKilledWritesLanded waits until the killed leader's process has ended
// and no write it sent is still being answered.
func (r *azureRun) waitKilledWritesLanded(ctx context.Context, killed *azureInstance) error {
	return r.wait(ctx, "the killed leader's writes to land", func() string {
		if !killed.exited.Load() {
			return "its process has not ended"
		}
		if n := r.emu.WritesInFlight(); n > 0 {
			return fmt.Sprintf("%d writes in flight", n)
		}
		return ""
	})
}

// killAtFirstWrite replaces one endpoint of a churned Service every 250 ms,
// so that the leader plans, until the emulator has the leader's first write,
// from inside which it kills the leader.
func (r *azureRun) killAtFirstWrite(ctx context.Context, leader *azureInstance, churned []*azureSvc, a *report.AzureFigures) error {
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

// kill SIGKILLs the instance's process without waiting for it (it runs
// inside the emulator's write): it leads no more, its lease left held.
func (in *azureInstance) kill() {
	in.stopped.Store(true)
	in.proc.kill()
}
