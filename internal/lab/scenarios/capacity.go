package scenarios

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

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
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("no scheduled pods")
	}
	sort.Slice(nodes, func(i, j int) bool {
		if len(byNode[nodes[i]]) != len(byNode[nodes[j]]) {
			return len(byNode[nodes[i]]) > len(byNode[nodes[j]])
		}
		return nodes[i] < nodes[j]
	})
	node := nodes[0]
	r.mark("cordon %s", node)
	r.cordoned = append(r.cordoned, node)
	if err := r.lab.setUnschedulable(ctx, node, true); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(byNode[node]))
	for _, name := range byNode[node] {
		wg.Go(func() {
			errs <- r.evict(ctx, name)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
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
