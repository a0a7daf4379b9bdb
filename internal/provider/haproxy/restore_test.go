package haproxy

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// TestRestoreAfterWorkerKilled: a killed HAProxy worker takes its master
// with it, and Alive says so; Restore starts HAProxy again from the
// configuration and server-state files, with the same backends — the drained
// one still in drain — and traffic is served again, never by the drained
// backend. On a live HAProxy Restore does nothing.
func TestRestoreAfterWorkerKilled(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	bs := startBackends(t, 2, "127.0.13")
	const key, lbAddr = "default/restore", "127.0.0.63"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, bs)
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired)
	// Drain the second backend at run time (mirrored to the files).
	l.Backends[1].State, l.Backends[1].Weight = model.Draining, 0
	desired.Listeners = []model.Listener{l}
	applyDiff(t, p, desired)
	eventually(t, 20*time.Second, "the active backend serving", func() error {
		if got, err := get(lbAddr, port); err != nil || got != bs[0].id() {
			return errors.New("not yet: " + got)
		}
		return nil
	})
	if restarted, err := p.Restore(ctx); restarted || err != nil {
		t.Fatalf("Restore on a live HAProxy: restarted %v, %v", restarted, err)
	}

	if err := syscall.Kill(workerPID(t, p), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "Alive to see HAProxy gone", func() error {
		if p.Alive(ctx) == nil {
			return errors.New("still alive")
		}
		return nil
	})
	if _, err := get(lbAddr, port); err == nil {
		t.Fatal("a request was served with the HAProxy gone")
	}
	restarted, err := p.Restore(ctx)
	if err != nil || !restarted {
		t.Fatalf("Restore: restarted %v, %v", restarted, err)
	}
	if err := p.Alive(ctx); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(desired, obs); d != "" {
		t.Fatalf("restored HAProxy differs from what it had (-want +got):\n%s", d)
	}
	eventually(t, 20*time.Second, "traffic served again", func() error {
		_, err := get(lbAddr, port)
		return err
	})
	for i := 0; i < 10; i++ {
		if got, err := get(lbAddr, port); err != nil || got != bs[0].id() {
			t.Fatalf("request %d after Restore answered %q, %v; want only the active backend %s", i, got, err, bs[0].id())
		}
	}
}

// TestRestoreWaitsForAReload: a master that does not answer while a reload
// of this Provider is under way (it re-executes itself) is asked again once
// the reload is over, before Restore says HAProxy is gone — here an
// attached Provider, whose Restore would report the error, while the test
// holds the reload lock with the master socket moved away.
func TestRestoreWaitsForAReload(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	startOwned(t, dir, nil)
	admin, master, config, err := Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := attach(t, Options{Dir: dir, AdminSocket: admin, MasterSocket: master, ConfigFile: config}, nil)
	p.mu.Lock()
	if err := os.Rename(master, master+".away"); err != nil {
		p.mu.Unlock()
		t.Fatal(err)
	}
	type result struct {
		restarted bool
		err       error
	}
	done := make(chan result, 1)
	go func() {
		restarted, err := p.Restore(ctx)
		done <- result{restarted, err}
	}()
	// Not a timing assertion: it lets Restore find the master silent.
	time.Sleep(500 * time.Millisecond)
	renameErr := os.Rename(master+".away", master)
	p.mu.Unlock()
	if renameErr != nil {
		t.Fatal(renameErr)
	}
	if r := <-done; r.restarted || r.err != nil {
		t.Fatalf("Restore during a reload: restarted %v, %v; want nothing done, no error", r.restarted, r.err)
	}
}

// TestAliveDuringOwnReload: while a reload of this Provider is under way the
// master re-executes and does not answer, yet the previous worker serves:
// Alive says so (a data-plane replica's readiness), where a silent master
// outside a reload of its own is not alive.
func TestAliveDuringOwnReload(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	startOwned(t, dir, nil)
	admin, master, config, err := Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The master "does not answer": its socket moved away, and back.
	silent := func(f func()) {
		if err := os.Rename(master, master+".away"); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.Rename(master+".away", master); err != nil {
				t.Fatal(err)
			}
		}()
		f()
	}
	var p *Provider
	during := errors.New("no reload seen")
	p = attach(t, Options{Dir: dir, AdminSocket: admin, MasterSocket: master, ConfigFile: config,
		Hooks: provider.Hooks{Write: func(op string) {
			if op == "reload" {
				silent(func() { during = p.Alive(ctx) })
			}
		}}}, nil)
	silent(func() {
		if err := p.Alive(ctx); err == nil {
			t.Fatal("Alive with the master silent and no reload under way: nil, want an error")
		}
	})
	bs := startBackends(t, 1, "127.0.14")
	const key, lbAddr = "default/alive", "127.0.0.64"
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)}})
	if during != nil {
		t.Fatalf("Alive during the Provider's own reload, master silent: %v; want nil (the previous worker serves)", during)
	}
}
