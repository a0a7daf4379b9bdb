package service_test

import (
	"context"

	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// testLeaderFailover: two replicas, only the leader touches the provider; the
// leader dies without releasing its lease; the standby takes over within the
// lease time and, nothing having changed, writes nothing.
func testLeaderFailover(t *testing.T, newProvider func(provider.Hooks) provider.Provider, class, ns string) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	if err := c.Create(ctx, lbService(ns, "ha", class, nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "ha", 8080, "198.18.60.1", "198.18.60.2")); err != nil {
		t.Fatal(err)
	}
	const lease = 4 * time.Second
	a := startReplica(t, cfg, replica{newProv: newProvider, sync: service.SyncIncremental, leaderElect: true, lease: lease})
	eventually(t, 30*time.Second, "replica A to lead and create the load balancer", func() (bool, string) {
		lb, _ := a.prov.Observe(ctx, ns+"/ha")
		return a.isLeader() && len(backendsOf(lb)) == 2, fmt.Sprintf("leader=%v backends=%v", a.isLeader(), backendsOf(lb))
	})
	// B resyncs every second once it leads: those reconciles must write
	// nothing either.
	b := startReplica(t, cfg, replica{newProv: newProvider, sync: service.SyncIncremental, leaderElect: true, lease: lease, resync: time.Second})
	time.Sleep(lease) // B has had time to try for the lease
	// A's check read above counts on A; B's counters must still be zero.
	if b.isLeader() {
		t.Fatal("two leaders")
	}
	// (A provider may read when it is created, e.g. HAProxy's process list;
	// the standby must not reconcile.)
	if w, r := metrics.Sum(b.metrics.ProviderWrites), metrics.Sum(b.metrics.Reconciles); w != 0 || r != 0 {
		t.Fatalf("standby acted: %v writes, %v reconciles", w, r)
	}

	// The version is the provider's concurrency token: it moves with any
	// Apply, even one with an empty plan (memory), or with any change of
	// content (HAProxy).
	before, err := a.prov.Observe(ctx, ns+"/ha")
	if err != nil {
		t.Fatal(err)
	}

	// A crashes: it does not release the lease.
	killed := time.Now()
	a.stop(t)
	eventually(t, 60*time.Second, "standby to take over", func() (bool, string) { return b.isLeader(), "" })
	// How fast the standby takes over is a figure for the bench, not an
	// assertion: on a loaded machine the renew loop can lag the lease.
	took := time.Since(killed)
	eventually(t, 60*time.Second, "new leader to reconcile and resync three times", func() (bool, string) {
		n := metrics.Sum(b.metrics.Reconciles)
		return n >= 4, fmt.Sprintf("reconciles=%v", n)
	})
	if w := metrics.Sum(b.metrics.ProviderWrites); w != 0 {
		t.Errorf("new leader wrote %v times with nothing changed", w)
	}
	if r, noop := metrics.Sum(b.metrics.Reconciles), metrics.Sum(b.metrics.Reconciles.WithLabelValues("noop")); r != noop {
		t.Errorf("new leader: %v reconciles, only %v noop", r, noop)
	}
	after, err := b.prov.Observe(ctx, ns+"/ha")
	if err != nil {
		t.Fatal(err)
	}
	if before.Version != after.Version {
		t.Errorf("new leader moved the version %q -> %q with nothing changed: an Apply was made", before.Version, after.Version)
	}
	t.Logf("takeover after %s (lease %s)", took.Round(10*time.Millisecond), lease)
	b.stop(t)
}

func TestLeaderFailoverMemory(t *testing.T) {
	// Both replicas see one load balancer store, as two controller pods see
	// one cloud; each counts its own calls.
	store := memory.New(provider.Hooks{})
	testLeaderFailover(t, func(h provider.Hooks) provider.Provider { return &counting{Provider: store, hooks: h} },
		"zerodrop.dev/memory", "default")
}

// counting counts one replica's calls on a shared store.
type counting struct {
	provider.Provider
	hooks provider.Hooks
}

func (c *counting) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	c.hooks.OnRead("get")
	return c.Provider.Observe(ctx, key)
}

func (c *counting) Apply(ctx context.Context, plan model.Plan) error {
	for _, op := range plan.Ops {
		c.hooks.OnWrite(string(op.Kind))
	}
	return c.Provider.Apply(ctx, plan)
}

func (c *counting) Delete(ctx context.Context, key string) error {
	c.hooks.OnWrite("delete")
	return c.Provider.Delete(ctx, key)
}

// TestLeaderFailoverHAProxy: two replicas attached to one real HAProxy.
func TestLeaderFailoverHAProxy(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	testLeaderFailover(t, func(h provider.Hooks) provider.Provider {
		p, err := haproxy.New(context.Background(), haproxy.Options{Dir: dir, Hooks: h, Log: testr.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, "zerodrop.dev/haproxy", "default")
}
