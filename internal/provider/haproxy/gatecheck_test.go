package haproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The tests of the master busy, of reloads racing drains and of a worker
// killed during a drain (stall_test.go, drainfault_test.go) need to know
// what HAProxy itself does, not what the Provider under test believes: these
// helpers talk to the sockets of the state directory on their own
// connections.

// sockCmd sends one command to a socket of dir and returns the reply.
func sockCmd(dir, sock, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return runtimeClient{path: filepath.Join(dir, sock)}.do(ctx, cmd)
}

// served is what the worker that serves new connections shows of one server.
type served struct {
	worker int  // its PID
	found  bool // the server exists in it
	admin  int  // srv_admin_state
}

func (s served) drained() bool {
	return s.found && s.admin&adminDrainMask != 0 && s.admin&adminMaintMask == 0
}

func (s served) String() string {
	return fmt.Sprintf("worker %d: server found %v, admin state %#x", s.worker, s.found, s.admin)
}

// servingWorker is the worker that accepts new connections: the one the
// master lists under `# workers`. frozen, when non-zero, is the worker of a
// master the test has stopped: a stopped master neither answers nor forks, so
// that worker is the only one there is.
func servingWorker(dir string, frozen int) (int, error) {
	if frozen != 0 {
		return frozen, nil
	}
	text, err := sockCmd(dir, "master.sock", "show proc")
	if err != nil {
		return 0, err
	}
	info, err := parseProc(text)
	if err != nil {
		return 0, err
	}
	if len(info.Workers) != 1 {
		return 0, fmt.Errorf("master lists workers %v", info.Workers)
	}
	return info.Workers[0], nil
}

// readServing reads server b in the worker that serves new connections: the
// admin socket must be answered by that worker (`show info`), before and
// after the read, else the read is taken again (a reload under way). A read
// that cannot be tied to the serving worker is an error, never a guess.
func readServing(dir string, frozen *atomic.Int64, b *backendServer) (served, error) {
	var last error
	// Bounded in time, not in tries: while the master re-executes for a
	// reload its socket refuses connections, for seconds on a loaded machine
	// (100 tries 20 ms apart ran out beside stress-ng --cpu 2).
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i == 0 || time.Now().Before(deadline); i++ {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		w, err := servingWorker(dir, int(frozen.Load()))
		if err != nil {
			last = err
			continue
		}
		info, err := sockCmd(dir, "admin.sock", "show info")
		if err != nil {
			last = err
			continue
		}
		if !slices.Contains(strings.Split(info, "\n"), fmt.Sprintf("Pid: %d", w)) {
			last = fmt.Errorf("admin socket not answered by the serving worker %d", w)
			continue
		}
		text, err := sockCmd(dir, "admin.sock", "show servers state")
		if err != nil {
			last = err
			continue
		}
		rows, err := parseServersState(text)
		if err != nil {
			last = err
			continue
		}
		if again, err := servingWorker(dir, int(frozen.Load())); err != nil || again != w {
			last = fmt.Errorf("serving worker changed from %d to %d (%v) during the read", w, again, err)
			continue
		}
		s := served{worker: w}
		for _, r := range rows {
			if r.Addr == b.addr && r.Port == b.port {
				s.found, s.admin = true, r.AdminState
			}
		}
		return s, nil
	}
	return served{}, fmt.Errorf("could not read the serving worker: %w", last)
}

// gateAnswer is what the serving worker showed right after the gate answered.
type gateAnswer struct {
	at  served
	err error
}

// startGate waits, as the drain endpoint does (every replica reads its own
// Provider; gate is one that never writes), for gate.Backends to report b no
// longer active in key, looking again after every failed read. The moment it
// does, it reads the serving worker itself: a gate that answered early is
// caught with the server still active there.
func startGate(t *testing.T, gate *Provider, dir string, frozen *atomic.Int64, key string, b *backendServer) <-chan gateAnswer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan gateAnswer, 1)
	go func() {
		for ctx.Err() == nil {
			sts, err := gate.Backends(ctx, key)
			if err == nil && !backendActive(sts, b) {
				s, err := readServing(dir, frozen, b)
				out <- gateAnswer{at: s, err: err}
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return out
}

// backendActive is drain.noNewConnections for one backend: present and
// Active in the reading.
func backendActive(sts []provider.BackendStatus, b *backendServer) bool {
	for _, st := range sts {
		if st.Address == b.addr && st.Port == b.port && st.State == model.Active {
			return true
		}
	}
	return false
}

// awaitGate fails the test unless the gate answered with b drained in the
// serving worker.
func awaitGate(t *testing.T, ch <-chan gateAnswer, b *backendServer) {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("gate answered for %s; then: %v", b.id(), a.err)
		}
		if !a.at.drained() {
			t.Fatalf("gate answered for %s while the worker serving new connections shows %s: it answered early", b.id(), a.at)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("gate never answered for %s", b.id())
	}
}

// stopMaster SIGSTOPs the master of p and returns the function that resumes
// it; the test's cleanup resumes it too, on failure as well, before HAProxy
// is stopped (cleanups run last registered first).
func stopMaster(t *testing.T, master int) (resume func()) {
	t.Helper()
	resume = func() {
		if err := syscall.Kill(master, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("SIGCONT master %d: %v", master, err)
		}
	}
	t.Cleanup(resume)
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP master %d: %v", master, err)
	}
	return resume
}

// stateFileDrained reports whether the server-state file of dir, which a
// reload or a restart loads, has b drained.
func stateFileDrained(dir string, b *backendServer) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "server-state"))
	if err != nil {
		return false, err
	}
	rows, err := parseServersState(string(data))
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.Addr == b.addr && r.Port == b.port {
			return r.AdminState&adminDrainMask != 0, nil
		}
	}
	return false, fmt.Errorf("server %s not in the server-state file", b.id())
}

// converge does what the controller does until HAProxy matches desired:
// observe, diff, apply; a failed Apply (the master busy, a conflict) is
// tried again. It returns the last error when HAProxy never matched.
func converge(p *Provider, desired *model.LoadBalancer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		obs, err := p.Observe(ctx, desired.Key)
		if err == nil {
			plan := model.Diff(obs, desired)
			if plan.Empty() {
				return nil
			}
			if err = p.Apply(ctx, plan); err == nil {
				continue
			}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never converged: %w", desired.Key, last)
}

// applyOnce is one drain request: observe, diff, apply, tried again only
// while Apply fails (a conflict with the concurrent reload); it does not
// look again after a successful Apply, so what a later reload does to the
// change is left for the test to see.
func applyOnce(p *Provider, desired *model.LoadBalancer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		obs, err := p.Observe(ctx, desired.Key)
		if err == nil {
			plan := model.Diff(obs, desired)
			if err = p.Apply(ctx, plan); err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never applied: %w", desired.Key, last)
}

// onlyReaches fails the test when n new connections to addr:port reach a
// backend outside want.
func onlyReaches(t *testing.T, addr string, port int32, n int, want ...*backendServer) {
	t.Helper()
	seen := reached(t, addr, port, n)
	for id := range seen {
		if !slices.ContainsFunc(want, func(b *backendServer) bool { return b.id() == id }) {
			t.Fatalf("new connections reached %v; only %d backends may take them", seen, len(want))
		}
	}
}
