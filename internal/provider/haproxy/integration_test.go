package haproxy

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestScaleAtRuntimeWithoutReload: servers come and go through the runtime
// API with the worker unchanged and an established connection intact, and a
// fresh Provider on the same HAProxy sees nothing to do.
func TestScaleAtRuntimeWithoutReload(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 5, "127.0.1")
	const key, lbAddr = "default/web", "127.0.0.50"
	port := freePort(t, lbAddr)
	desired := func(n int) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs[:n])}}
	}

	c.take()
	plan := applyDiff(t, p, desired(3))
	if !plan.Create {
		t.Fatalf("first plan should create: %s", plan)
	}
	writes, _ := c.take()
	if count(writes, "reload") != 1 {
		t.Fatalf("create: writes %v, want exactly one reload", writes)
	}
	if seen := reached(t, lbAddr, port, 12); len(seen) != 3 {
		t.Fatalf("3 backends: requests reached %v", seen)
	}
	worker := workerPID(t, p)
	// The first two backends stay throughout.
	lc := openLongConn(t, lbAddr, port, bs[0].id(), bs[1].id())

	plan = applyDiff(t, p, desired(5))
	writes, _ = c.take()
	if got := plan.Counts()[model.OpAddBackend]; got != 2 || len(plan.Ops) != 2 {
		t.Fatalf("scale to 5: plan %s", plan)
	}
	if count(writes, "reload") != 0 || count(writes, "add-server") != 2 {
		t.Fatalf("scale to 5: writes %v, want 2 add-server and no reload", writes)
	}
	if seen := reached(t, lbAddr, port, 20); len(seen) != 5 {
		t.Fatalf("5 backends: requests reached %v", seen)
	}

	plan = applyDiff(t, p, desired(2))
	writes, _ = c.take()
	if got := plan.Counts()[model.OpRemoveBackend]; got != 3 || len(plan.Ops) != 3 {
		t.Fatalf("scale to 2: plan %s", plan)
	}
	if count(writes, "reload") != 0 || count(writes, "del-server") != 3 {
		t.Fatalf("scale to 2: writes %v, want 3 del-server and no reload", writes)
	}
	if got := workerPID(t, p); got != worker {
		t.Fatalf("worker changed from %d to %d: HAProxy reloaded", worker, got)
	}
	if body, err := lc.request(); err != nil || body != lc.backend {
		t.Fatalf("long-lived connection after scaling: %q, %v (was on %s)", body, err, lc.backend)
	}
	seen := reached(t, lbAddr, port, 12)
	if len(seen) != 2 || seen[bs[0].id()] == 0 || seen[bs[1].id()] == 0 {
		t.Fatalf("2 backends: requests reached %v", seen)
	}

	// The configuration mirrors the runtime changes.
	cfg, err := os.ReadFile(p.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(cfg), "\n    server "); n != 2 {
		t.Fatalf("rendered config has %d servers, want 2:\n%s", n, cfg)
	}

	// A controller restart: a fresh Provider attaches to the same HAProxy.
	var c2 counter
	fresh := attach(t, Options{Dir: dir}, &c2)
	master, _, _, err := p.Procs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m2, _, _, _ := fresh.Procs(ctx); m2 != master || workerPID(t, fresh) != worker {
		t.Fatalf("fresh provider restarted HAProxy: master %d→%d", master, m2)
	}
	obs, err := fresh.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := model.Diff(obs, desired(2)); !d.Empty() {
		t.Fatalf("fresh provider sees a difference: %s\nobserved %+v", d, obs)
	}
	c2.take()
	if err := fresh.Apply(ctx, model.Diff(obs, desired(2))); err != nil {
		t.Fatal(err)
	}
	if writes, reads := c2.take(); len(writes) != 0 || len(reads) != 0 {
		t.Fatalf("empty plan made writes %v, reads %v", writes, reads)
	}
	if obs.Version == "" {
		t.Fatal("observed load balancer has no version")
	}
}

func TestUnsupportedAndName(t *testing.T) {
	p := &Provider{}
	if p.Name() != "haproxy" {
		t.Fatalf("name %q", p.Name())
	}
	u := p.Unsupported()
	if !u[model.UDP] || !u[model.SCTP] || u[model.TCP] {
		t.Fatalf("unsupported %v", u)
	}
	_ = slices.Contains[[]int]
	_ = time.Second
}
