package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestOrphanedFrontends starts a controller on an HAProxy that already
// serves two zerodrop load balancers, as a restart finds them:
//   - "gone", whose Service was deleted while zerodrop did not run its
//     cleanup (finalizer removed by force): it must be swept;
//   - "held", whose Service has an invalid annotation (so it keeps what it
//     has) and no status yet: its frontend address must not be given to a
//     new Service.
func TestOrphanedFrontends(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	prov, err := haproxy.New(ctx, haproxy.Options{Dir: dir, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	const ns = "default"
	// Addresses from the controller's pool (startReplica's), lowest first:
	// the allocator hands out the lowest free one.
	const heldAddr, goneAddr = "127.0.101.1", "127.0.101.2"
	frontend := func(name, addr string) {
		t.Helper()
		key := ns + "/" + name
		lb := &model.LoadBalancer{Key: key, Listeners: []model.Listener{{
			Name: model.ListenerName(ns, name, corev1.ProtocolTCP, 80), Address: addr, Port: 80, Protocol: model.TCP,
			Backends: []model.Backend{{Address: "127.0.61.1", Port: 8080, Weight: model.DefaultWeight, State: model.Active}},
		}}}
		if err := prov.Apply(ctx, model.Diff(nil, lb)); err != nil {
			t.Fatalf("frontend %s: %v", key, err)
		}
	}
	frontend("held", heldAddr)
	frontend("gone", goneAddr)

	held := lbService(ns, "held", "zerodrop.dev/haproxy", map[string]string{model.AnnotationDrainTimeout: "soon"})
	if err := c.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	fresh := lbService(ns, "fresh", "zerodrop.dev/haproxy", nil)
	if err := c.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "fresh", 8080, "198.18.61.1")); err != nil {
		t.Fatal(err)
	}

	r := startReplica(t, cfg, replica{prov: prov})
	eventually(t, 60*time.Second, "the orphan swept and the new Service given an address", func() (bool, string) {
		gone, err := prov.Observe(ctx, ns+"/gone")
		var got corev1.Service
		_ = c.Get(ctx, client.ObjectKeyFromObject(fresh), &got)
		return err == nil && gone == nil && len(got.Status.LoadBalancer.Ingress) == 1,
			fmt.Sprintf("gone=%v (%v) fresh status=%+v", gone != nil, err, got.Status.LoadBalancer)
	})
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(fresh), &got); err != nil {
		t.Fatal(err)
	}
	if ip := got.Status.LoadBalancer.Ingress[0].IP; ip == heldAddr {
		t.Fatalf("the new Service got %s, the address the frontend of %s/held listens on", ip, ns)
	}
	kept, err := prov.Observe(ctx, ns+"/held")
	if err != nil || kept == nil || len(kept.Listeners) != 1 || kept.Listeners[0].Address != heldAddr {
		t.Fatalf("the invalid Service's frontend changed: %+v (%v)", kept, err)
	}
	r.stop(t)
}
