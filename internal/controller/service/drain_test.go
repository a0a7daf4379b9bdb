package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestTwoPhaseRemoval: a backend whose endpoint goes first drains and stays
// while it has connections, and is removed once they reach zero; with a
// short drain timeout it is removed when the timeout passes.
func TestTwoPhaseRemoval(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	for _, name := range []string{"drain", "timeout"} {
		ann := map[string]string{}
		if name == "timeout" {
			ann[model.AnnotationDrainTimeout] = "2s"
		}
		if err := c.Create(ctx, lbService(ns, name, "zerodrop.dev/memory", ann)); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, slice(ns, name, 8080, "10.4.0.1", "10.4.0.2")); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, prov, service.SyncIncremental)
	for _, name := range []string{"drain", "timeout"} {
		eventually(t, 20*time.Second, name+" has two backends", func() (bool, string) {
			lb, _ := prov.Observe(ctx, ns+"/"+name)
			return len(backendsOf(lb)) == 2, fmt.Sprint(backendsOf(lb))
		})
		prov.SetConnections(model.ListenerName(ns, name, "TCP", 80), "10.4.0.2:8080", 3)
		var sl discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-slice"}, &sl); err != nil {
			t.Fatal(err)
		}
		sl.Endpoints = sl.Endpoints[:1]
		if err := c.Update(ctx, &sl); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"10.4.0.1:8080=active", "10.4.0.2:8080=draining"}
	for _, name := range []string{"drain", "timeout"} {
		eventually(t, 10*time.Second, name+" backend draining", func() (bool, string) {
			lb, _ := prov.Observe(ctx, ns+"/"+name)
			return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(want), fmt.Sprint(backendsOf(lb))
		})
	}
	// zerodrop_backends says the same: an active and a draining backend on
	// each of the two load balancers.
	eventually(t, 10*time.Second, "zerodrop_backends 2 active, 2 draining", func() (bool, string) {
		a, d := r.backends(model.Active), r.backends(model.Draining)
		return a == 2 && d == 2, fmt.Sprintf("active %v, draining %v", a, d)
	})
	drainedAt := time.Now()
	// "timeout" goes when its 2 s pass although it still has connections.
	eventually(t, 10*time.Second, "timeout backend removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/timeout")
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	if d := time.Since(drainedAt); d < time.Second {
		t.Errorf("removed %s after draining began, before the drain timeout", d)
	}
	// "drain" (default timeout 30 s) stays while its connections last.
	lb, _ := prov.Observe(ctx, ns+"/drain")
	if fmt.Sprint(backendsOf(lb)) != fmt.Sprint(want) {
		t.Fatalf("drain backend went while it had connections: %v", backendsOf(lb))
	}
	prov.SetConnections(model.ListenerName(ns, "drain", "TCP", 80), "10.4.0.2:8080", 0)
	eventually(t, 10*time.Second, "drained backend removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/drain")
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	eventually(t, 10*time.Second, "zerodrop_backends 2 active, none draining", func() (bool, string) {
		a, d := r.backends(model.Active), r.backends(model.Draining)
		return a == 2 && d == 0, fmt.Sprintf("active %v, draining %v", a, d)
	})
	r.stop(t)
}
