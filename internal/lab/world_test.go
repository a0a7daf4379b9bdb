package lab

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/haproxy"
	"zerodrop.dev/zerodrop/internal/provider"
)

// recordingWorld is a world of the test's own: one HAProxy (the real
// world's package does the work), with every call the runner makes
// recorded, so the test sees the runner use the world it was given.
type recordingWorld struct {
	world.World
	mu   sync.Mutex
	runs []*recordingRun
}

func (w *recordingWorld) NewRun(env world.Env) world.Run {
	r := &recordingRun{Run: w.World.NewRun(env)}
	w.mu.Lock()
	w.runs = append(w.runs, r)
	w.mu.Unlock()
	return r
}

type recordingRun struct {
	world.Run
	mu                      sync.Mutex
	starts, stops, backends int
	writes                  []int64 // every count Writes returned, in order
	args                    [][]string
}

func (r *recordingRun) Start(ctx context.Context) error {
	r.mu.Lock()
	r.starts++
	r.mu.Unlock()
	return r.Run.Start(ctx)
}

func (r *recordingRun) Stop() {
	r.mu.Lock()
	r.stops++
	r.mu.Unlock()
	r.Run.Stop()
}

func (r *recordingRun) Writes() (int64, error) {
	n, err := r.Run.Writes()
	r.mu.Lock()
	r.writes = append(r.writes, n)
	r.mu.Unlock()
	return n, err
}

func (r *recordingRun) Backends(ctx context.Context, addr string) ([]provider.BackendStatus, error) {
	r.mu.Lock()
	r.backends++
	r.mu.Unlock()
	return r.Run.Backends(ctx, addr)
}

func (r *recordingRun) ControllerArgs(base []string) []string {
	args := r.Run.ControllerArgs(base)
	r.mu.Lock()
	r.args = append(r.args, args)
	r.mu.Unlock()
	return args
}

// TestFakeWorldRollout runs the rollout scenario through the runner
// (scenarios.Execute, unchanged) in a world of the test's own: the runner
// starts and stops the world's load balancer once, gives the controllers
// the world's flags, reads the backends from the world, and reports as
// the run's writes exactly what the world counted from the end of the
// setup to the end of the traffic.
func TestFakeWorldRollout(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	w := &recordingWorld{World: haproxy.New(haproxy.Options{})}
	var progress bytes.Buffer
	results, err := scenarios.Execute(ctx, scenarios.Options{Scenarios: []string{"rollout"}, Modes: []report.Mode{report.ModeZerodrop},
		World: w, Dir: filepath.Join(dir, "work"), Progress: &progress})
	t.Logf("%s", progress.String())
	if err != nil || len(results) != 1 || results[0].Err != nil {
		if b, rerr := os.ReadFile(filepath.Join(dir, "work", "lab.log")); rerr == nil {
			t.Logf("lab.log:\n%s", b)
		}
		t.Fatalf("Execute: %v, %d results (%+v)", err, len(results), results)
	}
	if len(w.runs) != 1 {
		t.Fatalf("the runner made %d runs of the world, want 1", len(w.runs))
	}
	r, res := w.runs[0], results[0]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starts != 1 || r.stops != 1 {
		t.Errorf("the world's load balancer started %d and stopped %d times, want once each", r.starts, r.stops)
	}
	if r.backends == 0 {
		t.Error("the runner never read the world's backends")
	}
	if len(r.args) == 0 || !slices.ContainsFunc(r.args[0], func(a string) bool { return a == "--haproxy-dir="+filepath.Join(dir, "work", "haproxy-1") }) {
		t.Errorf("the controllers' flags %v: want the world's HAProxy directory", r.args)
	}
	if len(r.writes) < 2 {
		t.Fatalf("the world's writes were read %d times, want at least the base and the end", len(r.writes))
	}
	if got, want := res.ProviderWrites, r.writes[len(r.writes)-1]-r.writes[0]; got != want || got == 0 {
		t.Errorf("the run reports %d writes; the world counted %d from the base to the end (a rollout writes)", got, want)
	}
}
