package haproxy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
)

// containerHAProxy runs HAProxy as its container does (ContainerArgs): in
// the foreground, in a process group of its own so that a "container crash"
// kills master and workers together.
func containerHAProxy(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	args, err := ContainerArgs(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return cmd
}

// TestContainerHAProxy is the data-plane pod's arrangement on real HAProxy:
// PrepareContainer writes the first configuration, HAProxy runs from
// ContainerArgs as a process zerodrop did not start, and zerodrop attaches —
// waiting for it when it starts first, as a container of the same pod may.
// When that HAProxy is killed (its container crashed) and started again from
// the same directory (the kubelet's restart), it serves the listener with
// its backends and their drain state, from the configuration and
// server-state file zerodrop wrote; the same Provider reads and writes it
// again.
func TestContainerHAProxy(t *testing.T) {
	ctx := testContext(t)
	dir := filepath.Join(t.TempDir(), "haproxy")
	if err := PrepareContainer(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	admin, master, config, err := Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}

	attached := make(chan *Provider, 1)
	go func() {
		p, err := New(ctx, Options{AdminSocket: admin, MasterSocket: master, ConfigFile: config,
			Log: testr.New(t), ReloadTimeout: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		attached <- p
	}()
	time.Sleep(500 * time.Millisecond) // zerodrop's container first
	cmd := containerHAProxy(t, dir)
	p := <-attached
	if p == nil {
		t.FailNow()
	}

	bs := startBackends(t, 2, "127.0.9")
	const key, lbAddr = "default/container", "127.0.0.61"
	l := listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)
	l.Backends[1].State = model.Draining
	want := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, want)
	if d := lbDiff(want, observe(t, p, key)); d != "" {
		t.Fatalf("after apply (-want +got):\n%s", d)
	}

	// The container crashes; the kubelet starts it again.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the attached Provider to see HAProxy gone", func() bool { return p.Alive(ctx) != nil })
	if err := PrepareContainer(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(config); string(now) == string(first) {
		t.Fatal("PrepareContainer replaced zerodrop's configuration with the empty one")
	}
	containerHAProxy(t, dir)
	waitFor(t, "the restarted HAProxy to answer", func() bool { return p.Alive(ctx) == nil })
	if d := lbDiff(want, observe(t, p, key)); d != "" {
		t.Fatalf("restarted HAProxy differs from what zerodrop wrote (-want +got):\n%s", d)
	}
	// And it is written as before.
	want.Listeners[0].Backends = want.Listeners[0].Backends[:1]
	applyDiff(t, p, want)
	if d := lbDiff(want, observe(t, p, key)); d != "" {
		t.Fatalf("after a write to the restarted HAProxy (-want +got):\n%s", d)
	}
}

func observe(t *testing.T, p *Provider, key string) *model.LoadBalancer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lb, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
