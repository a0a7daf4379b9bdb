package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestTwoClassesKeepEachOthersServices: two zerodrop controllers of two
// classes in one cluster share the finalizer's name, and each sees the
// other's Services carrying it. Neither may take the other's for one that
// left it: the other's finalizer and status stay while both reconcile (seen
// failing before AnnotationFinalizedBy: each stripped the other's finalizer
// and emptied its status). A Service that does leave its controller (type
// ClusterIP) still loses the finalizer and its status.
func TestTwoClassesKeepEachOthersServices(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns = "default"
	a := startController(t, cfg, memory.New(provider.Hooks{}), nil, controllerOptions{class: "zerodrop.dev/a", pool: "127.0.103.0/24"})
	defer a.stop(t)
	b := startController(t, cfg, memory.New(provider.Hooks{}), nil, controllerOptions{class: "zerodrop.dev/b", pool: "127.0.104.0/24"})
	defer b.stop(t)
	for _, svc := range []*corev1.Service{lbService(ns, "svc-a", "zerodrop.dev/a", 80, 8080), lbService(ns, "svc-b", "zerodrop.dev/b", 80, 8080)} {
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	held := func(name, class string) (bool, string) {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, err.Error()
		}
		valid := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionConfigValid)
		ok := slices.Contains(svc.Finalizers, service.Finalizer) && svc.Annotations[service.AnnotationFinalizedBy] == class &&
			len(svc.Status.LoadBalancer.Ingress) > 0 && (valid == nil || valid.Status != metav1.ConditionFalse)
		return ok, fmt.Sprintf("finalizers %v, finalized by %q, ingress %v, ConfigValid %v", svc.Finalizers,
			svc.Annotations[service.AnnotationFinalizedBy], svc.Status.LoadBalancer.Ingress, valid)
	}
	for name, class := range map[string]string{"svc-a": "zerodrop.dev/a", "svc-b": "zerodrop.dev/b"} {
		eventually(t, 30*time.Second, name+" finalized and addressed by its controller", func() (bool, string) { return held(name, class) })
	}
	// Both controllers reconcile both Services again (every change to a
	// Service with the finalizer reaches both).
	for round := 0; round < 5; round++ {
		for _, name := range []string{"svc-a", "svc-b"} {
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				var svc corev1.Service
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
					return err
				}
				svc.Labels = map[string]string{"round": fmt.Sprint(round)}
				return c.Update(ctx, &svc)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		for name, class := range map[string]string{"svc-a": "zerodrop.dev/a", "svc-b": "zerodrop.dev/b"} {
			if ok, got := held(name, class); !ok {
				t.Fatalf("round %d: %s lost what its controller holds: %s", round, name, got)
			}
		}
	}
	// svc-a leaves load balancing: its controller lets it go.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-a"}, &svc); err != nil {
			return err
		}
		svc.Spec.Type, svc.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
		return c.Update(ctx, &svc)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "svc-a let go by its controller", func() (bool, string) {
		var got corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-a"}, &got); err != nil {
			return false, err.Error()
		}
		return !slices.Contains(got.Finalizers, service.Finalizer) && len(got.Status.LoadBalancer.Ingress) == 0,
			fmt.Sprintf("finalizers %v, ingress %v", got.Finalizers, got.Status.LoadBalancer.Ingress)
	})
	if ok, got := held("svc-b", "zerodrop.dev/b"); !ok {
		t.Fatalf("svc-b: %s", got)
	}
}
