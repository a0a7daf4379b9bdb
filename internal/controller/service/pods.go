package service

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
)

// watchPods reconciles a load balancer when one of its gated pods becomes
// ready to be registered: with zerodrop's readiness gate a pod's endpoint is
// not ready until the load balancer serves it, so the EndpointSlice does not
// change at that moment — the pod does. The cached pods are trimmed to
// what zerodrop reads (internal/podcache lists what is read here).
func (c *Controller) watchPods(ctx context.Context) error {
	inf, err := c.cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	onPod := func(pod *corev1.Pod) {
		if !podgate.HasGate(pod) {
			return
		}
		var list corev1.ServiceList
		if err := c.cache.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return
		}
		for i := range list.Items {
			svc := &list.Items[i]
			if c.managed(svc) && len(svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				c.queue.AddAfter(c.opts.KeyFunc(svc), c.opts.CoalesceWindow)
			}
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				onPod(pod)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Pod)
			n, ok2 := cur.(*corev1.Pod)
			if ok1 && ok2 && (containersReady(o) != containersReady(n) || o.Status.PodIP != n.Status.PodIP) {
				onPod(n)
			}
		},
	})
	return err
}

func containersReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatePending reports endpoints whose pod is not ready only because
// zerodrop's readiness gate waits for the load balancer.
func (c *Controller) gatePending(ctx context.Context) func(discoveryv1.Endpoint) bool {
	return func(ep discoveryv1.Endpoint) bool {
		if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
			return false
		}
		var pod corev1.Pod
		if err := c.cache.Get(ctx, client.ObjectKey{Namespace: ep.TargetRef.Namespace, Name: ep.TargetRef.Name}, &pod); err != nil {
			return false
		}
		return pod.DeletionTimestamp == nil && podgate.HasGate(&pod) && containersReady(&pod)
	}
}
