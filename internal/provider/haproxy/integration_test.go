package haproxy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

func itoa(n int32) string { return strconv.Itoa(int(n)) }

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
	// Added servers serve after their first passing check.
	eventually(t, 30*time.Second, "5 backends serving", func() error {
		if seen := reached(t, lbAddr, port, 20); len(seen) != 5 {
			return fmt.Errorf("requests reached %v", seen)
		}
		return nil
	})

	plan = applyDiff(t, p, desired(2))
	writes, _ = c.take()
	if got := plan.Counts()[model.OpRemoveBackend]; got != 3 || len(plan.Ops) != 3 {
		t.Fatalf("scale to 2: plan %s", plan)
	}
	// Each removed server gets one shutdown of its sessions and a `del
	// server`, which removeServer sends again while a session is still
	// closing (seen beside stress-ng: 4 for 3 servers).
	if count(writes, "reload") != 0 || count(writes, "shutdown-sessions") != 3 || count(writes, "del-server") < 3 {
		t.Fatalf("scale to 2: writes %v, want 3 shutdown-sessions, at least 3 del-server and no reload", writes)
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
	if d := lbDiff(desired(2), obs); d != "" {
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

	// A weight change round-trips (compared with cmp, not Diff, so a Diff
	// blind to weights cannot pass).
	weighted := desired(2)
	weighted.Listeners[0].Backends[1].Weight = 50
	applyDiff(t, fresh, weighted)
	if obs, err := fresh.Observe(ctx, key); err != nil || lbDiff(weighted, obs) != "" {
		t.Fatalf("after a weight change (-want +got):\n%s (%v)", lbDiff(weighted, obs), err)
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
}

// TestDraining: a draining server shows DRAIN, keeps its established
// connection, takes no new one, and reports its connections until they end.
func TestDraining(t *testing.T) {
	ctx := testContext(t)
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 2, "127.0.3")
	const key, lbAddr = "default/drain", "127.0.0.52"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-8080", lbAddr, port, bs)
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired)
	lc := openLongConn(t, lbAddr, port, bs[1].id())

	l.Backends[1].State = model.Draining
	desired.Listeners = []model.Listener{l}
	c.take()
	applyDiff(t, p, desired)
	if writes, _ := c.take(); len(writes) != 1 || writes[0] != "set-server" {
		t.Fatalf("drain: writes %v, want one set-server", writes)
	}
	text, err := p.read(ctx, "show-stat", "show stat")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseStat(text)
	if err != nil {
		t.Fatal(err)
	}
	var status string
	for _, r := range rows {
		if r.Proxy == proxyName(key, l.Name) && r.Name == serverName(bs[1].addr, bs[1].port) {
			status = r.Status
		}
	}
	if !strings.HasPrefix(status, "DRAIN") {
		t.Fatalf("show stat status of the draining server: %q", status)
	}
	if body, err := lc.request(); err != nil || body != bs[1].id() {
		t.Fatalf("established connection on the draining server: %q, %v", body, err)
	}
	if seen := reached(t, lbAddr, port, 10); len(seen) != 1 || seen[bs[0].id()] != 10 {
		t.Fatalf("new connections reached %v, want only %s", seen, bs[0].id())
	}
	// ReadStat, the reader the lab uses, reads the same HAProxy: its
	// frontends accepted at least the connections above.
	statRows, err := ReadStat(ctx, p.admin.path)
	if err != nil {
		t.Fatal(err)
	}
	var accepted int64
	for _, r := range statRows {
		if r.IsFrontend() {
			accepted += r.Sessions
		}
	}
	if accepted < 10 {
		t.Fatalf("ReadStat: the frontends accepted %d sessions, want at least 10", accepted)
	}
	st := backendStatus(t, p, key, bs[1])
	if st.State != model.Draining || st.Connections != 1 {
		t.Fatalf("draining backend status %+v, want draining with 1 connection", st)
	}
	eventually(t, 10*time.Second, "active backend healthy", func() error {
		if st := backendStatus(t, p, key, bs[0]); !st.Healthy || !st.HealthKnown || st.State != model.Active {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	// Once the connection ends, the count drops and the server can go.
	lc.conn.Close()
	eventually(t, 10*time.Second, "drained", func() error {
		if st := backendStatus(t, p, key, bs[1]); st.Connections != 0 {
			return fmt.Errorf("%d connections", st.Connections)
		}
		return nil
	})
	l.Backends = l.Backends[:1]
	desired.Listeners = []model.Listener{l}
	applyDiff(t, p, desired)
	obs, err := p.Observe(ctx, key)
	if err != nil || lbDiff(desired, obs) != "" {
		t.Fatalf("after removal: %+v, %v", obs, err)
	}
}

func backendStatus(t *testing.T, p *Provider, key string, b *backendServer) provider.BackendStatus {
	t.Helper()
	sts, err := p.Backends(testContext(t), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Address == b.addr && st.Port == b.port {
			return st
		}
	}
	t.Fatalf("no status for %s in %+v", b.id(), sts)
	return provider.BackendStatus{}
}

// TestConflict: a plan made against a state that another Provider changed
// since is refused with ErrConflict and writes nothing; re-planning works.
func TestConflict(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 3, "127.0.4")
	const key, lbAddr = "default/race", "127.0.0.53"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, bs[:2])
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}})

	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	grow := l
	grow.Backends = append(append([]model.Backend(nil), l.Backends...), bs[2].backend())
	stale := model.Diff(obs, &model.LoadBalancer{Key: key, Listeners: []model.Listener{grow}})

	// Another writer (attached through the explicit sockets) drains a server.
	other := attach(t, Options{
		AdminSocket:  dir + "/admin.sock",
		MasterSocket: dir + "/master.sock",
		ConfigFile:   dir + "/haproxy.cfg",
	}, nil)
	drained := l
	drained.Backends = append([]model.Backend(nil), l.Backends...)
	drained.Backends[0].State = model.Draining
	applyDiff(t, other, &model.LoadBalancer{Key: key, Listeners: []model.Listener{drained}})

	c.take()
	err = p.Apply(ctx, stale)
	if !errorsIsConflict(err) {
		t.Fatalf("stale plan: err %v, want ErrConflict", err)
	}
	if writes, _ := c.take(); len(writes) != 0 {
		t.Fatalf("refused plan wrote %v", writes)
	}
	// Re-read, re-plan, retry.
	grow.Backends[0].State = model.Draining
	want := &model.LoadBalancer{Key: key, Listeners: []model.Listener{grow}}
	plan := applyDiff(t, p, want)
	if len(plan.Ops) != 1 || plan.Ops[0].Kind != model.OpAddBackend {
		t.Fatalf("re-planned %s", plan)
	}
	// A create plan for an existing load balancer conflicts too.
	if err := p.Apply(ctx, model.Diff(nil, want)); !errorsIsConflict(err) {
		t.Fatalf("create over existing: %v", err)
	}
}

// TestDeleteIsIdempotent: Delete removes one key's listeners only, and
// deleting what is gone is a no-op without writes.
func TestDeleteIsIdempotent(t *testing.T) {
	ctx := testContext(t)
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 2, "127.0.5")
	const lbAddr = "127.0.0.54"
	portA, portB := freePort(t, lbAddr), freePort(t, lbAddr)
	lbA := &model.LoadBalancer{Key: "team-a/api", Listeners: []model.Listener{listenerOf("team-a/api", "tcp-80", lbAddr, portA, bs)}}
	lbB := &model.LoadBalancer{Key: "team-b/api", Listeners: []model.Listener{listenerOf("team-b/api", "tcp-80", lbAddr, portB, bs)}}
	applyDiff(t, p, lbA)
	applyDiff(t, p, lbB)
	if obs, err := p.Observe(ctx, lbA.Key); err != nil || len(obs.Listeners) != 1 {
		t.Fatalf("observe A: %+v, %v", obs, err)
	}

	c.take()
	if err := p.Delete(ctx, lbA.Key); err != nil {
		t.Fatal(err)
	}
	if writes, _ := c.take(); len(writes) != 1 || writes[0] != "reload" {
		t.Fatalf("delete: writes %v", writes)
	}
	if obs, err := p.Observe(ctx, lbA.Key); err != nil || obs != nil {
		t.Fatalf("deleted load balancer observed: %+v, %v", obs, err)
	}
	if _, err := get(lbAddr, portA); err == nil {
		t.Fatal("deleted listener still answers")
	}
	obsB, err := p.Observe(ctx, lbB.Key)
	if err != nil || lbDiff(lbB, obsB) != "" {
		t.Fatalf("other load balancer changed: %+v, %v", obsB, err)
	}
	if seen := reached(t, lbAddr, portB, 4); len(seen) != 2 {
		t.Fatalf("other load balancer reached %v", seen)
	}
	for _, key := range []string{lbA.Key, "never/existed"} {
		if err := p.Delete(ctx, key); err != nil {
			t.Fatalf("delete %s again: %v", key, err)
		}
	}
	if writes, _ := c.take(); len(writes) != 0 {
		t.Fatalf("deleting what is gone wrote %v", writes)
	}
}

// TestMaintenanceIsHealed: a server left in maintenance (an interrupted
// add, an operator's `disable server`) is observed as such and set ready by
// the next plan; a fresh server's health is unknown until its first check.
func TestMaintenanceIsHealed(t *testing.T) {
	ctx := testContext(t)
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 3, "127.0.8")
	const key, lbAddr = "default/maint", "127.0.0.57"
	port := freePort(t, lbAddr)
	slow := listenerOf(key, "tcp-80", lbAddr, port, bs[:2])
	slow.Probe.IntervalMillis = 60000 // the first check runs at a random time within the interval
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{slow}}
	applyDiff(t, p, desired)

	slow.Backends = append(slow.Backends, bs[2].backend())
	desired.Listeners = []model.Listener{slow}
	applyDiff(t, p, desired)
	st := backendStatus(t, p, key, bs[2])
	t.Logf("fresh server status: %+v", st)
	// Checks are on but have not run: not healthy yet, so a readiness gate
	// waits for the first passing checks.
	if !st.HealthKnown || st.Healthy {
		t.Fatalf("fresh server before its first check: %+v, want health known and not healthy", st)
	}

	srv := proxyName(key, slow.Name) + "/" + serverName(bs[0].addr, bs[0].port)
	if reply, err := p.write(ctx, "set-server", "set server "+srv+" state maint"); err != nil || strings.TrimSpace(reply) != "" {
		t.Fatalf("maint: %q, %v", reply, err)
	}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	plan := model.Diff(obs, desired)
	if len(plan.Ops) != 1 || plan.Ops[0].Kind != model.OpUpdateBackend {
		t.Fatalf("plan for a server in maintenance: %s", plan)
	}
	c.take()
	if err := p.Apply(ctx, plan); err != nil {
		t.Fatal(err)
	}
	// Healed like a server enabled again: state ready and health down, on
	// one command line (no traffic on a health from before maintenance).
	if writes, _ := c.take(); len(writes) != 2 || writes[0] != "set-server" || writes[1] != "set-server" {
		t.Fatalf("healing writes %v, want set-server state ready and set-server health down", writes)
	}
	if obs, err := p.Observe(ctx, key); err != nil || lbDiff(desired, obs) != "" {
		t.Fatalf("after healing: %+v, %v", obs, err)
	}
}
