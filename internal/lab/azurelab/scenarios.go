package azurelab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// The restart and churn scenarios of zerodrop's controllers (restart-idle:
// idle.go; kill-mid-plan: chaos.go; shared-lb: sharedlb.go; upstream's
// restart: upstream.go).

// restart stops the writer (the leader) azureRestarts times and starts a
// replacement, with nothing changing in the cluster: every PUT it causes is
// a write a restart should not make.
func (r *azureRun) restart(ctx context.Context, a *report.AzureFigures) error {
	for i := 0; i < AzureRestarts; i++ {
		leader := r.leader()
		if leader == nil {
			return errors.New("no leader to restart")
		}
		t0 := time.Now()
		leader.stop()
		if _, err := r.start(true); err != nil {
			return err
		}
		// The new writer: the standby that takes over.
		err := r.waitNewLeader(ctx, leader)
		if err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		r.settle(ctx)
	}
	return nil
}

// waitNewLeader waits until a leader other than old has reconciled every
// load balancer and they hold what the Services ask for.
func (r *azureRun) waitNewLeader(ctx context.Context, old *azureInstance) error {
	return r.waitNewLeaderThen(ctx, old, func() string { return azureConverged(r.emu, azureGroup, r.ns, r.svcs) })
}

// waitNewLeaderThen waits until a zerodrop leader other than old has
// reconciled every load balancer it may write, and then says "" (the state
// the run must reach).
func (r *azureRun) waitNewLeaderThen(ctx context.Context, old *azureInstance, then func() string) error {
	return r.wait(ctx, "a new leader verifies every load balancer", func() string {
		l := r.leader()
		if l == nil || l == old {
			return "no new leader yet"
		}
		if n := l.counters().Reconciles; n < float64(len(r.lbNames())) {
			return fmt.Sprintf("the new leader reconciled %v load balancers", n)
		}
		return then()
	})
}

// churn replaces endpoints of half the Services (one a tick) while
// Services change (probe interval, a second port) on both load balancers,
// the changed ones among the churned: endpoint-driven and service-driven
// writes to the same load balancers at once, the issue report's race.
func (r *azureRun) churn(ctx context.Context, a *report.AzureFigures) error {
	churned := r.svcs[:max(1, len(r.svcs)/2)]
	changed := []*azureSvc{r.svcs[0], r.svcs[len(r.svcs)-1]}
	if len(r.svcs) > 1 {
		changed = append(changed, r.svcs[1])
	}
	endpointTick, serviceTick := time.NewTicker(50*time.Millisecond), time.NewTicker(500*time.Millisecond)
	defer endpointTick.Stop()
	defer serviceTick.Stop()
	end := time.After(r.opts.ChurnDuration)
	for e, s := 0, 0; ; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			t1 := time.Now()
			if _, err := r.waitConverged(ctx); err != nil {
				return fmt.Errorf("after churn: %w", err)
			}
			a.ConvergeSeconds = time.Since(t1).Seconds()
			r.settle(ctx)
			return nil
		case <-endpointTick.C:
			svc := churned[e%len(churned)]
			svc.replaceOne()
			if err := svc.pushEndpoints(ctx, r.c, r.ns); err != nil {
				return err
			}
			e++
		case <-serviceTick.C:
			svc := changed[s%len(changed)]
			if (s/len(changed))%2 == 0 {
				svc.interval = map[string]string{"": azureChangedInterval, azureChangedInterval: ""}[svc.interval]
			} else {
				svc.https = !svc.https
			}
			if err := svc.pushSpec(ctx, r.c, r.ns, r.class()); err != nil {
				return err
			}
			s++
		}
		a.Changes++
	}
}
