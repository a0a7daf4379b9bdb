package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// actScaleDown scales from 3 to 1 replica.
func actScaleDown(ctx context.Context, r *run) error {
	if err := r.scale(ctx, 1); err != nil {
		return err
	}
	return r.waitSteady(ctx, 1, r.steadyTimeout(replicas))
}

// actDrainNode does what `kubectl drain` does: cordon the node with the
// most pods, then evict each of its pods through the eviction API, retrying
// while a PodDisruptionBudget refuses (429), and waits for the replacements.
func actDrainNode(ctx context.Context, r *run) error {
	cs := r.lab.cp.Client
	pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		}
	}
	if len(byNode) == 0 {
		return fmt.Errorf("no scheduled pods")
	}
	// The node with the most pods, the first by name among equals.
	node := slices.MinFunc(slices.Collect(maps.Keys(byNode)), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(byNode[b]), len(byNode[a])), strings.Compare(a, b))
	})
	r.mark("cordon %s", node)
	r.cordoned = append(r.cordoned, node)
	if err := r.lab.setUnschedulable(ctx, node, true); err != nil {
		return err
	}
	var g errgroup.Group
	for _, name := range byNode[node] {
		g.Go(func() error { return r.evict(ctx, name) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return r.waitSteady(ctx, 4, r.steadyTimeout(4))
}

// evict asks the eviction API until it agrees (kubectl drain retries every
// 5 s; the lab every second).
func (r *run) evict(ctx context.Context, pod string) error {
	refused := false
	for {
		err := r.lab.cp.Client.PolicyV1().Evictions(r.ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: r.ns}})
		switch {
		case err == nil:
			r.mark("evicted %s", world.ShortPod(pod))
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err):
			if !refused {
				r.mark("PDB refuses %s", world.ShortPod(pod))
				refused = true
			}
		default:
			return fmt.Errorf("evict %s: %w", pod, err)
		}
		if !traffic.SleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
	}
}
