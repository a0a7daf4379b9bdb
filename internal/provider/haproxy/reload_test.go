package haproxy

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestFrontendChangeReloadsHitlessly: a new listener and a probe change
// reload HAProxy; a connection opened before keeps working on the old
// worker, the new worker serves the new listener, and the runtime changes
// made before (an added server, a drained one) survive the reload.
func TestFrontendChangeReloadsHitlessly(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 4, "127.0.2")
	const key, lbAddr = "shop/front", "127.0.0.51"
	portA, portB := freePort(t, lbAddr), freePort(t, lbAddr)
	a := listenerOf(key, "tcp-80", lbAddr, portA, bs[:3])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{a}}
	applyDiff(t, p, desired)

	// Runtime changes: one server more, one draining.
	a.Backends = append(a.Backends, bs[3].backend())
	a.Backends[1].State = model.Draining
	desired.Listeners = []model.Listener{a}
	c.take()
	applyDiff(t, p, desired)
	if writes, _ := c.take(); count(writes, "reload") != 0 {
		t.Fatalf("backend changes reloaded: %v", writes)
	}
	// The added server serves after its first passing check.
	eventually(t, 30*time.Second, "the added backend serving", func() error {
		if seen := reached(t, lbAddr, portA, 9); len(seen) != 3 {
			return fmt.Errorf("reached %v", seen)
		}
		return nil
	})
	worker := workerPID(t, p)
	lc := openLongConn(t, lbAddr, portA, bs[0].id(), bs[2].id())

	// A new listener: a frontend change.
	b := listenerOf(key, "tcp-443", lbAddr, portB, bs[:2])
	desired.Listeners = []model.Listener{a, b}
	start := time.Now()
	plan := applyDiff(t, p, desired)
	took := time.Since(start)
	writes, _ := c.take()
	if plan.Counts()[model.OpCreateListener] != 1 || len(plan.Ops) != 1 {
		t.Fatalf("plan %s", plan)
	}
	if count(writes, "reload") != 1 || len(writes) != 1 {
		t.Fatalf("new listener: writes %v, want one reload and nothing else", writes)
	}
	t.Logf("Apply with reload took %s", took)
	_, workers, old, err := p.Procs(ctx)
	if err != nil || len(workers) != 1 || workers[0] == worker {
		t.Fatalf("after reload: workers %v (before %d), err %v", workers, worker, err)
	}
	if !slices.Contains(old, worker) {
		t.Fatalf("old worker %d gone although a connection is open: old workers %v", worker, old)
	}
	if body, err := lc.request(); err != nil || body != lc.backend {
		t.Fatalf("long-lived connection after reload: %q, %v (was on %s)", body, err, lc.backend)
	}
	if seen := reached(t, lbAddr, portB, 6); len(seen) != 2 {
		t.Fatalf("new listener reached %v", seen)
	}
	// The drained server is still drained and the added one still there.
	seen := reached(t, lbAddr, portA, 12)
	if len(seen) != 3 || seen[bs[1].id()] != 0 {
		t.Fatalf("listener A after reload reached %v, want 3 backends without the draining %s", seen, bs[1].id())
	}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(desired, obs); d != "" {
		t.Fatalf("after reload: diff %s\nobserved %+v", d, obs)
	}
	// The old worker's connection is still counted for the backend.
	statuses, err := p.Backends(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range statuses {
		if st.Listener == a.Name && st.Address+":"+itoa(st.Port) == lc.backend && st.Connections < 1 {
			t.Fatalf("backend %s holds the long connection on the old worker, reported %d connections", lc.backend, st.Connections)
		}
	}

	// A probe change (TCP → HTTP) is a frontend change too.
	a.Probe = model.Probe{Kind: model.ProbeHTTP, Path: "/healthz", IntervalMillis: 300, Rise: 1, Fall: 2}
	desired.Listeners = []model.Listener{a, b}
	plan = applyDiff(t, p, desired)
	if plan.Counts()[model.OpUpdateListener] != 1 || len(plan.Ops) != 1 {
		t.Fatalf("probe change plan %s", plan)
	}
	if body, err := lc.request(); err != nil || body != lc.backend {
		t.Fatalf("long-lived connection after second reload: %q, %v", body, err)
	}
	cfg, err := os.ReadFile(p.ConfigFile())
	if err != nil || !strings.Contains(string(cfg), "option httpchk GET /healthz") {
		t.Fatalf("config lacks the HTTP check (%v):\n%s", err, cfg)
	}
	var c2 counter
	fresh := attach(t, Options{Dir: dir}, &c2)
	obs, err = fresh.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(desired, obs); d != "" {
		t.Fatalf("fresh provider after probe change: diff %s", d)
	}
	// The HTTP check passes (the backends answer any path with 200).
	eventually(t, 10*time.Second, "HTTP checks pass", func() error {
		sts, err := fresh.Backends(ctx, key)
		if err != nil {
			return err
		}
		for _, st := range sts {
			if !st.HealthKnown || !st.Healthy {
				return fmt.Errorf("%s %s:%d healthy=%v known=%v", st.Listener, st.Address, st.Port, st.Healthy, st.HealthKnown)
			}
		}
		return nil
	})
}

// TestInvalidChangesNothing: a configuration HAProxy rejects, or a listener
// HAProxy cannot serve, is refused before anything changes.
func TestInvalidChangesNothing(t *testing.T) {
	ctx := testContext(t)
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 1, "127.0.6")
	const key, lbAddr = "default/bad", "127.0.0.55"
	port := freePort(t, lbAddr)
	good := &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs)}}
	applyDiff(t, p, good)
	worker := workerPID(t, p)
	before, err := os.ReadFile(p.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}

	c.take()
	if err := p.reload(ctx, []byte("global\n    no-such-keyword 1\n"), nil); err == nil {
		t.Fatal("invalid configuration reloaded")
	} else if !strings.Contains(err.Error(), "no-such-keyword") {
		// An operator reads this in the Warning Event: it must say why.
		t.Errorf("the refusal does not give HAProxy's reason: %v", err)
	}
	udp := listenerOf(key, "udp-53", lbAddr, port, bs)
	udp.Protocol = model.UDP
	bad := &model.LoadBalancer{Key: key, Listeners: append(append([]model.Listener(nil), good.Listeners...), udp)}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(ctx, model.Diff(obs, bad)); err == nil {
		t.Fatal("UDP listener applied")
	}
	if writes, _ := c.take(); len(writes) != 0 {
		t.Fatalf("refused changes wrote %v", writes)
	}
	after, err := os.ReadFile(p.ConfigFile())
	if err != nil || string(after) != string(before) {
		t.Fatalf("configuration file changed (%v)", err)
	}
	if got := workerPID(t, p); got != worker {
		t.Fatalf("worker changed %d → %d", worker, got)
	}
	if seen := reached(t, lbAddr, port, 2); len(seen) != 1 {
		t.Fatalf("still serving: %v", seen)
	}
}

// TestColdStartKeepsState: with HAProxy stopped (machine reboot), a new
// Provider starts it from the mirrored configuration and server-state file,
// and observes what was there, drain included.
func TestColdStartKeepsState(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	bs := startBackends(t, 3, "127.0.7")
	const key, lbAddr = "default/cold", "127.0.0.56"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, bs[:2])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	p := startOwned(t, dir, nil)
	applyDiff(t, p, desired)
	l.Backends = append(l.Backends, bs[2].backend())
	l.Backends[0].State = model.Draining
	l.Backends[1].Weight = 7
	desired.Listeners = []model.Listener{l}
	applyDiff(t, p, desired)
	master, _, _, err := p.Procs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if p.alive(master) {
		t.Fatalf("master %d survived Close", master)
	}

	p2 := startOwned(t, dir, nil)
	if m2, _, _, _ := p2.Procs(ctx); m2 == master {
		t.Fatal("no new master")
	}
	obs, err := p2.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(desired, obs); d != "" {
		t.Fatalf("after cold start: diff %s", d)
	}
}

// TestFailedReloadKeepsServing: a configuration that passes `haproxy -c` but
// cannot start (its port is taken) fails the reload; the running worker keeps
// serving, the configuration file is restored, and a retry once the port is
// free succeeds.
func TestFailedReloadKeepsServing(t *testing.T) {
	ctx := testContext(t)
	p := startOwned(t, t.TempDir(), nil)
	bs := startBackends(t, 1, "127.0.9")
	const key, lbAddr = "default/busy", "127.0.0.58"
	portA := freePort(t, lbAddr)
	a := listenerOf(key, "tcp-80", lbAddr, portA, bs)
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{a}}
	applyDiff(t, p, desired)
	worker := workerPID(t, p)
	before, err := os.ReadFile(p.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}

	taken, err := net.Listen("tcp", lbAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := listenerOf(key, "tcp-443", lbAddr, int32(taken.Addr().(*net.TCPAddr).Port), bs)
	desired.Listeners = []model.Listener{a, busy}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.Apply(ctx, model.Diff(obs, desired))
	if err == nil {
		t.Fatal("reload onto a taken port succeeded")
	}
	t.Logf("failed reload after %s: %v", time.Since(start), err)
	if seen := reached(t, lbAddr, portA, 2); len(seen) != 1 {
		t.Fatalf("not serving after the failed reload: %v", seen)
	}
	if got := workerPID(t, p); got != worker {
		t.Fatalf("worker %d replaced by %d", worker, got)
	}
	after, err := os.ReadFile(p.ConfigFile())
	if err != nil || string(after) != string(before) {
		t.Fatalf("configuration not restored (%v):\n%s", err, after)
	}

	taken.Close()
	applyDiff(t, p, desired)
	if seen := reached(t, lbAddr, busy.Port, 2); len(seen) != 1 {
		t.Fatalf("new listener after retry: %v", seen)
	}
}
