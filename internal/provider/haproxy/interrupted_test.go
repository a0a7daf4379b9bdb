package haproxy

import (
	"fmt"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// cutAddServer does what a writer killed right after its plan's first
// command leaves behind for a new backend (the lab's kill-mid-plan): `add
// server` and nothing more — the server in maintenance, its check off.
func cutAddServer(t *testing.T, p *Provider, key string, l model.Listener, b *backendServer) string {
	t.Helper()
	srv := proxyName(key, l.Name) + "/" + serverName(b.addr, b.port)
	cmd := fmt.Sprintf("add server %s %s weight %d %s", srv, hostPort(b.addr, b.port), model.DefaultWeight, checkArgs(l.Probe))
	if err := p.command(testContext(t), "add-server", cmd, replyServerAdded); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestCutAddServerHealed: the next writer's plan for a server whose add was
// cut short brings it into service — check enabled, then up after passing
// checks — rather than leaving it held down with no check to lift it.
func TestCutAddServerHealed(t *testing.T) {
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 2, "127.0.4")
	const key, lbAddr = "default/cut", "127.0.0.54"
	port := freePort(t, lbAddr)
	desired := func(n int) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs[:n])}}
	}
	applyDiff(t, p, desired(1))
	cutAddServer(t, p, key, desired(2).Listeners[0], bs[1])

	plan := applyDiff(t, p, desired(2))
	if plan.Counts()[model.OpUpdateBackend] != 1 || len(plan.Ops) != 1 {
		t.Fatalf("plan for the server left in maintenance: %s, want one update-backend", plan)
	}
	eventually(t, 30*time.Second, "the healed server serving", func() error {
		if seen := reached(t, lbAddr, port, 12); len(seen) != 2 {
			return fmt.Errorf("requests reached %v", seen)
		}
		return nil
	})
}

// TestHeldDownWithoutCheckIsNotServing: a server HAProxy holds down with its
// check off never turns healthy by itself; Backends must say it does not
// serve, or a readiness gate would let its pod turn Ready.
func TestHeldDownWithoutCheckIsNotServing(t *testing.T) {
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 2, "127.0.5")
	const key, lbAddr = "default/held", "127.0.0.55"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, bs[:1])
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}})
	srv := cutAddServer(t, p, key, l, bs[1])
	ctx := testContext(t)
	for _, cmd := range []string{"set server " + srv + " state ready", "set server " + srv + " health down"} {
		if err := p.command(ctx, "set-server", cmd, ""); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.Backends(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Address == bs[1].addr && s.Port == bs[1].port && (!s.HealthKnown || s.Healthy) {
			t.Fatalf("held-down server without a check: healthy %v, known %v; want known not healthy", s.Healthy, s.HealthKnown)
		}
	}
	if seen := reached(t, lbAddr, port, 6); seen[bs[1].id()] != 0 {
		t.Fatalf("the held-down server was sent requests: %v", seen)
	}
}
