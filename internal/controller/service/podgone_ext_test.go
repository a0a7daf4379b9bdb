package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestStoppedPodsBackendGoesBeforeDrainTimeout: with a provider that counts
// no connections (-1, as Azure), a draining backend whose endpoint is gone
// stays while a pod still has its address, and goes once that pod is
// deleted — not at the drain timeout (30 s by default), which the test does
// not wait for. A Service without a selector (its endpoints any address,
// here no pod's) keeps its draining backend: no pod holding the address
// says nothing of its connections.
func TestStoppedPodsBackendGoesBeforeDrainTimeout(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns, name, manual = "default", "stopped", "manual"
	if err := c.Create(ctx, lbService(ns, name, "zerodrop.dev/memory", nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, name, 8080, "10.4.0.1", "10.4.0.2")); err != nil {
		t.Fatal(err)
	}
	noSelector := lbService(ns, manual, "zerodrop.dev/memory", nil)
	noSelector.Spec.Selector = nil
	if err := c.Create(ctx, noSelector); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, manual, 8080, "10.5.0.1", "10.5.0.2")); err != nil {
		t.Fatal(err)
	}
	for i, ip := range []string{"10.4.0.1", "10.4.0.2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	listener := model.ListenerName(ns, name, "TCP", 80)
	prov.SetConnections(listener, "10.4.0.2:8080", -1)
	prov.SetConnections(model.ListenerName(ns, manual, "TCP", 80), "10.5.0.2:8080", -1)
	r := startController(t, cfg, prov, service.SyncIncremental)
	for _, svc := range []string{name, manual} {
		eventually(t, 20*time.Second, svc+" has two backends", func() (bool, string) {
			lb, _ := prov.Observe(ctx, ns+"/"+svc)
			return len(backendsOf(lb)) == 2, fmt.Sprint(backendsOf(lb))
		})
		var sl discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: svc + "-slice"}, &sl); err != nil {
			t.Fatal(err)
		}
		sl.Endpoints = sl.Endpoints[:1]
		if err := c.Update(ctx, &sl); err != nil {
			t.Fatal(err)
		}
	}
	wantManual := fmt.Sprint([]string{"10.5.0.1:8080=active", "10.5.0.2:8080=draining"})
	eventually(t, 10*time.Second, "the selector-less Service's backend draining", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+manual)
		return fmt.Sprint(backendsOf(lb)) == wantManual, fmt.Sprint(backendsOf(lb))
	})
	want := fmt.Sprint([]string{"10.4.0.1:8080=active", "10.4.0.2:8080=draining"})
	eventually(t, 10*time.Second, "backend draining", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+name)
		return fmt.Sprint(backendsOf(lb)) == want, fmt.Sprint(backendsOf(lb))
	})
	// Its pod still has the address (taken out of the Service, not
	// stopped): it keeps draining.
	time.Sleep(2 * time.Second)
	if lb, _ := prov.Observe(ctx, ns+"/"+name); fmt.Sprint(backendsOf(lb)) != want {
		t.Fatalf("backend of a pod still running went before its drain timeout: %v", backendsOf(lb))
	}
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1"}},
		client.GracePeriodSeconds(0), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	eventually(t, 10*time.Second, "stopped pod's backend removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+name)
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	t.Logf("removed %s after its pod's deletion", time.Since(deleted).Round(time.Millisecond))
	if lb, _ := prov.Observe(ctx, ns+"/"+manual); fmt.Sprint(backendsOf(lb)) != wantManual {
		t.Errorf("the selector-less Service's draining backend went before its drain timeout: %v", backendsOf(lb))
	}
	r.stop(t)
}
