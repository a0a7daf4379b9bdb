package azurewrites

import (
	"context"
	"fmt"
	"time"
)

// The Azure lab's waits: until the load balancers converge, and until the
// controllers are idle.

// waitConverged waits until the load balancers hold what the Services ask
// for and returns how long that took; it then waits for the controllers to
// be idle, so that writes still on their way are counted.
func (r *azureRun) waitConverged(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := r.wait(ctx, "the load balancers to converge", func() string {
		return azureConverged(r.emu, azureGroup, r.ns, r.svcs)
	})
	took := time.Since(t0)
	if err == nil {
		r.settle(ctx)
	}
	return took, err
}

// waitLimit bounds one wait: azureTimeout, or longer with a longer churn
// (more changes to converge from) or lease (a lost leader is replaced after
// it expires).
func (r *azureRun) waitLimit() time.Duration {
	return max(azureTimeout, 20*r.opts.ChurnDuration, 4*azureLease)
}

// wait polls cond until it returns "" or waitLimit passes.
func (r *azureRun) wait(ctx context.Context, what string, cond func() string) error {
	limit := r.waitLimit()
	deadline := time.Now().Add(limit)
	for {
		msg := cond()
		if msg == "" {
			return nil
		}
		if err := r.procsGone(); err != nil {
			return fmt.Errorf("%s: %s: %w", what, msg, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %s: %s", limit, what, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settleLimit bounds settle: a run whose controllers never go quiet (seen
// once, in a run of two independent writers that kept waking each other,
// which held the lab until its context ended) goes on with its measurement
// instead of hanging the lab.
const settleLimit = 30 * time.Second

// settle waits until no running controller has reconciled for azureIdle,
// at most settleLimit.
func (r *azureRun) settle(ctx context.Context) {
	last, since, end := -1.0, time.Now(), time.Now().Add(settleLimit)
	for time.Since(since) < azureIdle && ctx.Err() == nil && time.Now().Before(end) {
		n := 0.0
		for _, in := range r.instances {
			n += in.counters().Reconciles
		}
		if n != last {
			last, since = n, time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}
