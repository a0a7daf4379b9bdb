package haproxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// midDrain runs fire once, inside the next drain's Apply: after its
// `set server … state drain` has been answered and before the mirror reads
// the runtime to write the server-state file (the first read after that
// write). That is the window in which the drain is in the worker only.
type midDrain struct {
	armed, wrote, fired atomic.Bool
	fire                func()
}

func (m *midDrain) hooks() provider.Hooks {
	return provider.Hooks{
		Write: func(op string) {
			if op == "set-server" && m.armed.Load() {
				m.wrote.Store(true)
			}
		},
		Read: func(op string) {
			if op == "show-stat" && m.wrote.Load() && !m.fired.Swap(true) {
				m.fire()
			}
		},
	}
}

// startHooked is startOwned with hooks of the test's own.
func startHooked(t *testing.T, dir string, h provider.Hooks) *Provider {
	t.Helper()
	p, err := New(testContext(t), Options{Dir: dir, Hooks: h, StopOnClose: true, ReloadTimeout: 20 * time.Second,
		Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1})})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { stopAll(t, p) })
	return p
}

// TestWorkerKilledDuringDrain: the HAProxy worker is killed in the middle of
// a drain, after `set server … state drain` and before the mirror: the master
// goes with it and Apply reports the error. Restore starts HAProxy again from
// the files, which do not have the drain yet. The gate, waiting meanwhile,
// does not answer while the restored worker has the server active; the
// controller's next look drains it there; then the gate answers, the
// restored worker and the server-state file have the server in drain, and
// new connections reach only the other backends.
func TestWorkerKilledDuringDrain(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	var victim atomic.Int64
	m := &midDrain{fire: func() {
		// SIGKILL, then wait for the master to have gone with its worker,
		// so that the mirror finds no HAProxy.
		pid := int(victim.Load())
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 500; i++ {
			if _, err := sockCmd(dir, "master.sock", "show proc"); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}}
	p := startHooked(t, dir, m.hooks())
	bs := startBackends(t, 3, "127.0.16")
	const key, lbAddr = "default/killed", "127.0.0.66"
	desired, port := stallLB(t, p, key, lbAddr, bs)
	victim.Store(int64(workerPID(t, p)))

	want := drained(desired, bs[2])
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m.armed.Store(true)
	if err := p.Apply(ctx, model.Diff(obs, want)); err == nil {
		t.Fatal("Apply reported success although HAProxy died before the drain was mirrored")
	} else {
		t.Logf("drain with the worker killed: %v", err)
	}
	if !m.fired.Load() {
		t.Fatal("the worker was not killed during the drain")
	}
	if p.Alive(ctx) == nil {
		t.Fatal("Alive: HAProxy still alive after its worker was killed")
	}

	// The gate of another replica is waiting; its Provider attaches to the
	// restored HAProxy.
	restarted, err := p.Restore(ctx)
	if err != nil || !restarted {
		t.Fatalf("Restore: restarted %v, %v", restarted, err)
	}
	var live atomic.Int64
	s, err := readServing(dir, &live, bs[2])
	if err != nil || !s.found {
		t.Fatalf("restored HAProxy: %s (%v)", s, err)
	}
	t.Logf("restored from the files written before the drain: %s", s)
	gate := attach(t, Options{Dir: dir}, nil)
	answer := startGate(t, gate, dir, &live, key, bs[2])
	if err := converge(p, want); err != nil {
		t.Fatal(err)
	}
	awaitGate(t, answer, bs[2])
	if ok, err := stateFileDrained(dir, bs[2]); !ok || err != nil {
		t.Fatalf("server-state file after the drain: drained %v, %v", ok, err)
	}
	eventually(t, 30*time.Second, "traffic served again", func() error {
		_, err := get(lbAddr, port)
		return err
	})
	onlyReaches(t, lbAddr, port, 20, bs[0], bs[1])
}

// TestReloadBetweenDrainAndMirror: a reload this Provider did not make (an
// operator's, or one the master runs after the provider gave up waiting for
// it) replaces the worker between a drain's `set server` and its mirror. The
// new worker loaded the server-state file from before the drain, so it has
// the server active, and Apply says so with a conflict instead of success.
// The gate, started then, does not answer while the serving worker has the
// server active: it answers only once the controller's next look has drained
// it there; the server-state file then has the drain too.
func TestReloadBetweenDrainAndMirror(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	var old atomic.Int64
	var fired error
	m := &midDrain{fire: func() {
		// The reload, and the new worker serving the admin socket.
		if _, err := sockCmd(dir, "master.sock", "reload"); err != nil {
			fired = err
		}
		for i := 0; i < 500; i++ {
			if w, err := servingWorker(dir, 0); err == nil && w != int(old.Load()) && adminAnswers(dir, w) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		fired = errors.New("no new worker after the reload")
	}}
	p := startHooked(t, dir, m.hooks())
	bs := startBackends(t, 3, "127.0.17")
	const key, lbAddr = "default/between", "127.0.0.67"
	desired, port := stallLB(t, p, key, lbAddr, bs)
	old.Store(int64(workerPID(t, p)))

	var live atomic.Int64
	gate := attach(t, Options{Dir: dir}, nil)
	want := drained(desired, bs[2])
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m.armed.Store(true)
	applyErr := p.Apply(ctx, model.Diff(obs, want))
	if !m.fired.Load() || fired != nil {
		t.Fatalf("the reload during the drain: fired %v, %v", m.fired.Load(), fired)
	}
	s, err := readServing(dir, &live, bs[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the new worker after the reload: %s", s)
	if s.drained() {
		t.Fatalf("the new worker has the drain (%s): the reload did not come between the drain and its mirror", s)
	}
	// Apply does not report a drain the serving worker lost as done.
	if !errors.Is(applyErr, provider.ErrConflict) {
		t.Fatalf("Apply of the drain returned %v while the serving worker shows %s; want a conflict", applyErr, s)
	}
	t.Logf("Apply of the drain across the reload: %v", applyErr)

	answer := startGate(t, gate, dir, &live, key, bs[2])
	if err := converge(p, want); err != nil {
		t.Fatal(err)
	}
	awaitGate(t, answer, bs[2])
	if ok, err := stateFileDrained(dir, bs[2]); !ok || err != nil {
		t.Fatalf("server-state file after the drain: drained %v, %v", ok, err)
	}
	onlyReaches(t, lbAddr, port, 20, bs[0], bs[1])
}

// adminAnswers reports whether worker pid answers `show info` on the admin
// socket of dir.
func adminAnswers(dir string, pid int) bool {
	info, err := sockCmd(dir, "admin.sock", "show info")
	return err == nil && slices.Contains(strings.Split(info, "\n"), fmt.Sprintf("Pid: %d", pid))
}
