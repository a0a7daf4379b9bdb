package scenarios

import (
	"context"
	"fmt"
)

// actRollout changes the pod template (as `kubectl rollout restart` does)
// and waits for the rollout and every old pod's end.
func actRollout(ctx context.Context, r *run) error {
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// actRolloutLocal replaces the one pod by one on another node (the lab's
// scheduler spreads: the old pod's node has a pod, the others none), so the
// old node's last local endpoint leaves while the new node's health check
// has yet to pass.
func actRolloutLocal(ctx context.Context, r *run) error {
	before, err := r.podNodeNames(ctx)
	if err != nil {
		return err
	}
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	if err := r.waitSteady(ctx, 1, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	after, err := r.podNodeNames(ctx)
	if err != nil {
		return err
	}
	if len(before) != 1 || len(after) != 1 || before[0] == after[0] {
		return fmt.Errorf("rollout-local: the pod ran on %v and then on %v, want one node and then another", before, after)
	}
	return nil
}
