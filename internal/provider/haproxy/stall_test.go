package haproxy

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// stallLB is a load balancer of two backends from the configuration and the
// rest added at run time: an added server reaches a new worker only through
// the mirrored configuration and server-state file, the harder case for a
// reload.
func stallLB(t *testing.T, p *Provider, key, addr string, bs []*backendServer) (*model.LoadBalancer, int32) {
	t.Helper()
	port := freePort(t, addr)
	l := listenerOf(key, "tcp-80", addr, port, bs[:2])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired)
	l.Backends = append(l.Backends, listenerOf(key, "tcp-80", addr, port, bs[2:]).Backends...)
	desired.Listeners = []model.Listener{l}
	applyDiff(t, p, desired)
	eventually(t, 30*time.Second, "every backend serving", func() error {
		if seen := reached(t, addr, port, 3*len(bs)); len(seen) != len(bs) {
			return fmt.Errorf("reached %v", seen)
		}
		return nil
	})
	return desired, port
}

// drained returns a copy of lb with b draining.
func drained(lb *model.LoadBalancer, b *backendServer) *model.LoadBalancer {
	out := model.Canonical(lb)
	for i := range out.Listeners[0].Backends {
		be := &out.Listeners[0].Backends[i]
		if be.Address == b.addr && be.Port == b.port {
			be.State, be.Weight = model.Draining, 0
		}
	}
	return out
}

// queueCommand connects to the master socket and sends cmd, as a client
// whose command a stopped master has not read yet; the returned channel gets
// the outcome once the master has run it (a reload closes the connection).
func queueCommand(t *testing.T, dir, cmd string) <-chan error {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(dir, "master.sock"))
	if err != nil {
		t.Fatalf("queue %q: %v", cmd, err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		t.Fatalf("queue %q: %v", cmd, err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatalf("queue %q: %v", cmd, err)
	}
	done := make(chan error, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
		_, err := io.ReadAll(conn)
		done <- err
	}()
	return done
}

func await(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no outcome", what)
	}
}

// TestDrainWhileMasterStopped: the HAProxy master is stopped (SIGSTOP: busy,
// not answering) with a reload it accepted queued, while the controller needs
// a reload for another load balancer and a backend is drained. The drain
// needs only the worker's admin socket: it is in the serving worker, and in
// the server-state file, while the master is still stopped; the reload fails
// meanwhile (the master does not answer). The gate — another Provider polling
// Backends as the drain endpoint of another replica does — answers only once
// the worker serving new connections has the server in drain, read there
// independently. Once the master resumes, the queued reload and the retried
// one run; the new worker still has the server in drain, the other load
// balancer serves, and no new connection reaches the drained backend.
func TestDrainWhileMasterStopped(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	gate := attach(t, Options{Dir: dir}, nil)
	bs := startBackends(t, 3, "127.0.14")
	const key, other, lbAddr = "default/stall", "default/stall-other", "127.0.0.64"
	desired, port := stallLB(t, p, key, lbAddr, bs)
	master, workers, _, err := p.Procs(ctx)
	if err != nil || len(workers) != 1 {
		t.Fatalf("show proc: workers %v, %v", workers, err)
	}
	w0 := workers[0]

	var frozen atomic.Int64
	frozen.Store(int64(w0))
	resume := stopMaster(t, master)
	queued := queueCommand(t, dir, "reload")

	// Another load balancer appears: a reload, which the stopped master
	// cannot do.
	lo := listenerOf(other, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])
	otherLB := &model.LoadBalancer{Key: other, Listeners: []model.Listener{lo}}
	reloadTried := make(chan error, 1)
	go func() {
		obs, err := p.Observe(ctx, other)
		if err == nil {
			err = p.Apply(ctx, model.Diff(obs, otherLB))
		}
		reloadTried <- err
	}()

	answer := startGate(t, gate, dir, &frozen, key, bs[2])
	want := drained(desired, bs[2])
	if err := converge(p, want); err != nil {
		t.Fatalf("drain with the master stopped: %v", err)
	}
	s, err := readServing(dir, &frozen, bs[2])
	if err != nil || !s.drained() || s.worker != w0 {
		t.Fatalf("after the drain, with the master stopped: %s (%v); want the server drained in worker %d", s, err, w0)
	}
	if ok, err := stateFileDrained(dir, bs[2]); !ok || err != nil {
		t.Fatalf("server-state file after the drain: drained %v, %v", ok, err)
	}
	select {
	case err := <-reloadTried:
		if err == nil {
			t.Fatal("a reload succeeded with the master stopped: the test did not stop it")
		}
		t.Logf("reload with the master stopped: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the reload attempt never returned with the master stopped")
	}

	// The master resumes: the queued reload runs, the controller retries its
	// own.
	frozen.Store(0)
	resume()
	await(t, queued, "the queued reload")
	if err := converge(p, otherLB); err != nil {
		t.Fatal(err)
	}
	if err := converge(p, want); err != nil {
		t.Fatal(err)
	}
	awaitGate(t, answer, bs[2])

	s, err = readServing(dir, &frozen, bs[2])
	if err != nil || !s.drained() || s.worker == w0 {
		t.Fatalf("after the master resumed: %s (%v); want the server drained in a new worker (not %d)", s, err, w0)
	}
	if ok, err := stateFileDrained(dir, bs[2]); !ok || err != nil {
		t.Fatalf("server-state file after the reloads: drained %v, %v", ok, err)
	}
	onlyReaches(t, lbAddr, port, 20, bs[0], bs[1])
	onlyReaches(t, lbAddr, lo.Port, 4, bs[0])
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(want, obs); d != "" {
		t.Fatalf("after the master resumed (-want +got):\n%s", d)
	}
}

// TestReloadsRacingDrains: round after round, a reload (another load
// balancer's listener added or removed) runs concurrently with one drain
// request (one successful Apply, not looked at again) of a backend, a
// runtime-added one in most rounds. For each, the gate answers only once the
// worker serving new connections — the new one when the reload won the race
// — has the server in drain, never on the strength of the old worker; after
// both, the serving worker and the server-state file have every drained
// server in drain, after one more reload too, and new connections reach
// only the backend left active.
func TestReloadsRacingDrains(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	gate := attach(t, Options{Dir: dir}, nil)
	bs := startBackends(t, 5, "127.0.15")
	const key, other, lbAddr = "default/race", "default/race-other", "127.0.0.65"
	desired, port := stallLB(t, p, key, lbAddr, bs)
	la := listenerOf(other, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])
	lb := listenerOf(other, "tcp-81", lbAddr, freePort(t, lbAddr), bs[:1])
	otherLB := &model.LoadBalancer{Key: other, Listeners: []model.Listener{la}}
	applyDiff(t, p, otherLB)

	var live atomic.Int64 // zero: the master answers
	want := desired
	workersSeen := map[int]bool{workerPID(t, p): true}
	for i := 1; i < len(bs); i++ {
		answer := startGate(t, gate, dir, &live, key, bs[i])
		want = drained(want, bs[i])
		next := &model.LoadBalancer{Key: other, Listeners: []model.Listener{la}}
		if i%2 == 1 {
			next.Listeners = append(next.Listeners, lb)
		}
		reloaded, drainDone := make(chan error, 1), make(chan error, 1)
		go func() { reloaded <- converge(p, next) }()
		go func(w *model.LoadBalancer) { drainDone <- applyOnce(p, w) }(want)
		await(t, reloaded, fmt.Sprintf("round %d: the reload", i))
		await(t, drainDone, fmt.Sprintf("round %d: the drain", i))
		awaitGate(t, answer, bs[i])
		workersSeen[workerPID(t, p)] = true
		for _, b := range bs[1 : i+1] {
			s, err := readServing(dir, &live, b)
			if err != nil || !s.drained() {
				t.Fatalf("round %d: %s after the reload and the drain: %s (%v)", i, b.id(), s, err)
			}
			if ok, err := stateFileDrained(dir, b); !ok || err != nil {
				t.Fatalf("round %d: server-state file: %s drained %v, %v", i, b.id(), ok, err)
			}
		}
	}
	if len(workersSeen) < len(bs) {
		t.Fatalf("workers %v: not every round reloaded", workersSeen)
	}
	// One more reload, after every drain: it keeps them all.
	otherLB.Listeners = []model.Listener{la, lb}
	if err := converge(p, otherLB); err != nil {
		t.Fatal(err)
	}
	if w := workerPID(t, p); workersSeen[w] {
		t.Fatalf("worker %d: the last change of %s did not reload", w, other)
	}
	for _, b := range bs[1:] {
		if s, err := readServing(dir, &live, b); err != nil || !s.drained() {
			t.Fatalf("%s after the last reload: %s (%v)", b.id(), s, err)
		}
	}
	onlyReaches(t, lbAddr, port, 10, bs[0])
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(want, obs); d != "" {
		t.Fatalf("after the rounds (-want +got):\n%s", d)
	}
}
