package service_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestDataPlaneSynced: a data-plane replica is Synced (its readiness) only
// once every load balancer of its first pass has been reconciled without
// error — not while the first write is held, and at once after it lands.
func TestDataPlaneSynced(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, name = "default", "synced"
	svc := lbService(ns, name, "zerodrop.dev/memory", nil)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.101.7"}}
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, name, 8080, "198.18.66.1")); err != nil {
		t.Fatal(err)
	}
	prov := memory.New(provider.Hooks{})
	held, release := make(chan struct{}, 1), make(chan struct{})
	prov.BeforeApply = func(string) {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctl, err := service.New(rctx, mgr, service.Options{Provider: prov, Role: service.RoleDataPlane, Metrics: m, Logger: testr.New(t),
		AddressPool: netip.MustParsePrefix("127.0.101.0/24"), ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(rctx) }()
	defer func() { cancel(); <-done }()
	if ctl.Synced() {
		t.Fatal("synced before it started")
	}
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the first write never came")
	}
	time.Sleep(500 * time.Millisecond)
	if ctl.Synced() {
		t.Fatal("synced while its first write is held")
	}
	close(release)
	eventually(t, 30*time.Second, "synced after the write landed", func() (bool, string) {
		return ctl.Synced(), "not synced"
	})
	if lb, _ := prov.Observe(ctx, ns+"/"+name); lb == nil || len(lb.Listeners) != 1 || lb.Listeners[0].Address != "127.0.101.7" {
		t.Fatalf("load balancer %+v: want the listener at the status address", lb)
	}
}
