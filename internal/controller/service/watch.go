package service

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
)

// watch maps every event to the load balancer key it concerns. Handlers only
// enqueue keys: the worker re-reads current state (level-triggered).
func (c *Controller) watch(ctx context.Context) error {
	svcInf, err := c.cache.GetInformer(ctx, &corev1.Service{})
	if err != nil {
		return fmt.Errorf("service informer: %w", err)
	}
	onService := func(obj any) {
		if svc, ok := unwrap(obj).(*corev1.Service); ok && (c.managed(svc) || hasFinalizer(svc)) {
			c.queue.Add(c.opts.KeyFunc(svc))
		}
	}
	if _, err := svcInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onService,
		UpdateFunc: func(old, cur any) {
			onService(old) // a Service that left zerodrop still needs its cleanup
			onService(cur)
		},
		DeleteFunc: onService,
	}); err != nil {
		return err
	}

	sliceInf, err := c.cache.GetInformer(ctx, &discoveryv1.EndpointSlice{})
	if err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}
	onSlice := func(obj any) {
		slice, ok := unwrap(obj).(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		name := slice.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			return
		}
		var svc corev1.Service
		if err := c.cache.Get(ctx, client.ObjectKey{Namespace: slice.Namespace, Name: name}, &svc); err != nil {
			return
		}
		if c.managed(&svc) {
			// Endpoint changes are coalesced: a burst of them becomes one
			// reconcile (the queue holds a key once) and so one write.
			c.queue.AddAfter(c.opts.KeyFunc(&svc), c.opts.CoalesceWindow)
		}
	}
	if _, err := sliceInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onSlice,
		UpdateFunc: func(_, cur any) { onSlice(cur) },
		DeleteFunc: onSlice,
	}); err != nil {
		return err
	}

	if err := c.watchPods(ctx); err != nil {
		return err
	}
	if err := c.watchReplicaPods(ctx); err != nil {
		return err
	}
	nodeInf, err := c.cache.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	onNode := func(obj any) {
		if _, ok := unwrap(obj).(*corev1.Node); ok {
			c.enqueueNodeMode(ctx)
		}
	}
	_, err = nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onNode,
		UpdateFunc: func(old, cur any) {
			if nodeChanged(old.(*corev1.Node), cur.(*corev1.Node)) {
				onNode(cur)
			}
		},
		DeleteFunc: onNode,
	})
	return err
}

// enqueueNodeMode enqueues the load balancers whose backends are nodes.
func (c *Controller) enqueueNodeMode(ctx context.Context) {
	var list corev1.ServiceList
	if err := c.cache.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		svc := &list.Items[i]
		// The mode before settling: a Service the provider's node-mode
		// default leaves in IP mode costs its load balancer one look.
		if cfg, _ := model.ParseServiceConfig(svc.Annotations, c.defaultMode); c.managed(svc) && cfg.Mode == model.NodeMode {
			c.queue.Add(c.opts.KeyFunc(svc))
		}
	}
}

// nodeChanged ignores heartbeats and readiness: only what changes a backend
// counts (model.NodeExcluded).
func nodeChanged(old, cur *corev1.Node) bool {
	return model.NodeAddress(old) != model.NodeAddress(cur) || model.NodeExcluded(old) != model.NodeExcluded(cur)
}

func unwrap(obj any) any {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// maxRetryDelay caps the backoff of a load balancer whose reconcile keeps
// failing. client-go's default grows to 1000 s: after a dozen failures in a
// row (a provider refusing a change while a backend still has connections)
// a load balancer would wait minutes for its next try long after the cause
// is gone. The upstream service controller caps at 300 s; a load balancer
// that serves traffic should not wait more than this.
const maxRetryDelay = 30 * time.Second
