package service

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// listRetry is how often seeding the allocator asks the provider again.
const listRetry = 2 * time.Second

// listLoadBalancers lists the load balancers the provider holds for
// zerodrop; nil when it cannot list them (provider.Lister). With retry it
// asks until it gets an answer or ctx ends: the allocator must not hand
// out addresses before it knows which ones are served.
func (c *Controller) listLoadBalancers(ctx context.Context, retry bool) (map[string]*model.LoadBalancer, error) {
	lister, ok := c.opts.Provider.(provider.Lister)
	if !ok {
		return nil, nil
	}
	for {
		lbs, err := lister.List(ctx)
		if err == nil || !retry {
			return lbs, err
		}
		c.opts.Logger.Error(err, "listing the provider's load balancers; retrying")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list load balancers: %w (last: %v)", ctx.Err(), err)
		case <-time.After(listRetry):
		}
	}
}

// holdAddresses keeps the frontend addresses the provider serves from being
// given to another Service.
func (c *Controller) holdAddresses(lbs map[string]*model.LoadBalancer) {
	if !c.alloc.enabled() {
		return
	}
	for key, lb := range lbs {
		for _, l := range lb.Listeners {
			c.alloc.hold(key, l.Address)
		}
	}
}

// enqueueOrphans enqueues every load balancer the provider holds, so that
// one no Service wants (its Service was deleted while its finalizer was
// removed by force, or while zerodrop did not run) is reconciled to nothing:
// deleted, through the same work item as any other change (invariant 2).
// It runs only from Start, after the caches have synced (invariant 4), and
// on every resync.
func (c *Controller) enqueueOrphans(ctx context.Context) []string {
	lbs, err := c.listLoadBalancers(ctx, false)
	if err != nil {
		c.opts.Logger.Error(err, "listing the provider's load balancers; orphans are swept at the next resync")
		return nil
	}
	var keys []string
	c.holdAddresses(lbs)
	for key := range lbs {
		var list corev1.ServiceList
		if err := c.cache.List(ctx, &list, client.MatchingFields{serviceKeyIndex: key}); err != nil {
			c.opts.Logger.Error(err, "list services", "loadBalancer", key)
			continue
		}
		if len(list.Items) == 0 {
			c.opts.Logger.Info("no Service wants this load balancer; removing it", "loadBalancer", key)
		}
		c.queue.Add(key)
		keys = append(keys, key)
	}
	return keys
}
