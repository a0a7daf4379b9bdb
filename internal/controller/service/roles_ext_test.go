package service_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
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
	ctl := startDataPlane(t, cfg, prov)
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

// startDataPlane runs a data-plane replica's Service controller with prov
// until the test ends.
func startDataPlane(t *testing.T, cfg *rest.Config, prov provider.Provider) *service.Controller {
	t.Helper()
	return startService(t, cfg, service.Options{Provider: prov, Role: service.RoleDataPlane,
		AddressPool: netip.MustParsePrefix("127.0.101.0/24"), ResyncPeriod: time.Hour})
}

// startService runs the Service controller alone (without the gates that
// controller.Build wires beside it) with opts, its metrics and logger the
// test's (its metrics the caller's when opts has them), in a manager of
// its own until the test ends.
func startService(t *testing.T, cfg *rest.Config, opts service.Options) *service.Controller {
	t.Helper()
	if opts.Metrics == nil {
		m, err := metrics.New(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		opts.Metrics = m
	}
	mgr, err := manager.New(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts.Logger = testr.New(t)
	ctl, err := service.New(ctx, mgr, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })
	return ctl
}

// refusingProvider refuses every write to one load balancer, as HAProxy
// refuses a listener whose port another process holds.
type refusingProvider struct {
	*memory.Provider
	refused string
	tries   *atomic.Int32 // writes to the refused load balancer
}

func (p refusingProvider) Apply(ctx context.Context, plan model.Plan) error {
	if plan.Key == p.refused {
		p.tries.Add(1)
		return fmt.Errorf("apply %s: port taken: %w", plan.Key, provider.ErrRefused)
	}
	return p.Provider.Apply(ctx, plan)
}

// TestDataPlaneSyncedBesideARefusedService: one Service whose load balancer
// the provider refuses (provider.ErrRefused) does not keep a data-plane
// replica from being Synced once the others are served: one tenant's bad
// Service must not hold the replica out of every gate and rollout. Nor is
// it retried back to back while nothing changes: at HAProxy each try is a
// reload of every load balancer (the queue's own back-off starts at 5 ms).
func TestDataPlaneSyncedBesideARefusedService(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns = "default"
	for i, name := range []string{"good", "bad"} {
		svc := lbService(ns, name, "zerodrop.dev/memory", nil)
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("127.0.101.%d", 10+i)}}
		if err := c.Status().Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, slice(ns, name, 8080, fmt.Sprintf("198.18.66.%d", 1+i))); err != nil {
			t.Fatal(err)
		}
	}
	prov := refusingProvider{Provider: memory.New(provider.Hooks{}), refused: ns + "/bad", tries: new(atomic.Int32)}
	ctl := startDataPlane(t, cfg, prov)
	eventually(t, 60*time.Second, "synced with the good load balancer built", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/good")
		return ctl.Synced() && len(backendsOf(lb)) == 1, fmt.Sprintf("synced %v, good %+v", ctl.Synced(), lb)
	})
	// Not a timing assertion: a loaded machine makes fewer tries, not more.
	time.Sleep(3 * time.Second)
	if n := prov.tries.Load(); n > 2 {
		t.Errorf("the refused load balancer was tried %d times in the first seconds with nothing changed; want at most 2 (a retry waits %s)", n, 10*time.Second)
	}
}
