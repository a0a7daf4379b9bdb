package azurewrites

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// The restart scenario of zerodrop's controllers (restart-idle: idle.go;
// churn: churn.go; kill-mid-plan: chaos.go; shared-lb: sharedlb.go;
// upstream's restart: upstream.go).

// restart stops the writer (the leader) Restarts times and starts a
// replacement, with nothing changing in the cluster: every PUT it causes is
// a write a restart should not make.
func (r *azureRun) restart(ctx context.Context, a *report.AzureFigures) error {
	for i := 0; i < r.opts.Restarts; i++ {
		t0 := time.Now()
		// The new writer: the standby that takes over.
		if err := r.restartZerodropOnce(ctx, syscall.SIGTERM, nil, func() string {
			return azureConverged(r.emu, azureGroup, r.ns, r.svcs)
		}); err != nil {
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
