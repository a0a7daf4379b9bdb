package service

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
)

// A draining IP-mode backend goes once its connections reach zero or its
// drain timeout passes (step). A provider that counts no connections
// (Azure: -1) would keep it for the whole timeout, 30 s by default, after
// its pod has stopped: on emulated Azure that was the longest part of a
// rollout of a Local Service (docs/azure.md). A pod that has stopped for
// good — its object deleted, which the kubelet allows only once its
// containers are gone, or in a terminal phase — has no connection left,
// so its backend is drained whatever the provider counts. Only a backend
// desired no longer has (while its endpoint is listed, terminating, the pod
// may still serve), and only of a Service with a selector: its endpoints
// are pods; a Service without one may list any address, which no pod
// holding it says nothing of.

// stoppedPods answers, for one step, which draining backends' pods have
// stopped. The pods of a namespace are listed from the cache once, and only
// when a backend asks.
type stoppedPods struct {
	ctx     context.Context
	c       *Controller
	desired *model.LoadBalancer
	ipMode  func(listener string) bool // IP mode, and its Service's endpoints are pods
	held    map[string]map[string]bool // namespace → backend addresses its pods hold
}

func (c *Controller) stoppedPods(ctx context.Context, desired *model.LoadBalancer, ipMode func(string) bool) *stoppedPods {
	return &stoppedPods{ctx: ctx, c: c, desired: desired, ipMode: ipMode, held: map[string]map[string]bool{}}
}

// stopped reports that b, a draining backend of listener, belongs to a pod
// that has stopped for good. A failed read of the pods says no: the drain
// timeout still ends it.
func (s *stoppedPods) stopped(listener string, b model.Backend) bool {
	if !s.ipMode(listener) {
		return false
	}
	want := wanted(s.desired, listener)
	if _, listed := want[b.ID()]; listed {
		return false
	}
	ns, _, _ := strings.Cut(listener, "/")
	held, ok := s.held[ns]
	if !ok {
		var pods corev1.PodList
		// Read only, so not copied: a namespace may have thousands.
		if err := s.c.cache.List(s.ctx, &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			logFrom(s.ctx).V(2).Info("pods unreadable; draining backends wait for their drain timeout", "namespace", ns, "err", err)
			return false
		}
		held = heldAddresses(pods.Items, s.c.opts.BackendAddressMap)
		s.held[ns] = held
	}
	return podStopped(true, want, held, b)
}

// podStopped is stopped's decision: an IP-mode backend that desired does
// not list (want: the listener's desired backends) and whose address no pod
// that may still run holds (held).
func podStopped(ipMode bool, want map[string]model.Backend, held map[string]bool, b model.Backend) bool {
	if !ipMode {
		return false
	}
	if _, listed := want[b.ID()]; listed {
		return false
	}
	return !held[model.CanonicalIP(b.Address)]
}

// heldAddresses are the backend addresses (mapped as the backends' are) of
// the pods that may still run: every pod not in a terminal phase, being
// deleted or not.
func heldAddresses(pods []corev1.Pod, amap []model.AddressMapping) map[string]bool {
	out := map[string]bool{}
	for i := range pods {
		pod := &pods[i]
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if pod.Status.PodIP != "" {
			out[model.CanonicalIP(model.MapAddress(amap, pod.Status.PodIP))] = true
		}
		for _, ip := range pod.Status.PodIPs {
			out[model.CanonicalIP(model.MapAddress(amap, ip.IP))] = true
		}
	}
	return out
}
