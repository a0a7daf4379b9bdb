package probe

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/testr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// serve runs a Socket at path with a liveness check that passes and a
// readiness check that passes while ready is true.
func serve(t *testing.T, path string, ready *atomic.Bool) error {
	t.Helper()
	s := &Socket{Path: path, Log: testr.New(t), Handler: Handler(map[string]healthz.Checker{"ping": healthz.Ping},
		map[string]healthz.Checker{"synced": func(*http.Request) error {
			if !ready.Load() {
				return errors.New("not every load balancer reconciled yet")
			}
			return nil
		}})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	// Started once the socket answers, or failed.
	for {
		select {
		case err := <-done:
			cancel()
			return err
		default:
		}
		if _, _, err := Get(context.Background(), path, LivenessPath, DefaultTimeout); err == nil {
			t.Cleanup(func() {
				cancel()
				<-done
			})
			return nil
		}
	}
}

// probeRun is `zerodrop probe` as the kubelet's exec runs it: its exit
// code and output.
func probeRun(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// TestExecProbe: the exec probe exits 0 only when the process' check
// answers 200 through its socket; a failing check, a socket nobody serves
// and a usage error are not 0. A socket file left by an earlier run is
// replaced; one another process answers on is refused (two processes never
// answer one pod's probes).
func TestExecProbe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "probe.sock")
	var ready atomic.Bool

	// A stale socket file: bound, then left behind without a listener.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the stale socket file is not there: %v", err)
	}
	if code, out := probeRun("--socket", path, "/healthz"); code != 1 {
		t.Errorf("probe of a socket nobody serves: exit %d (%s), want 1", code, out)
	}
	if err := serve(t, path, &ready); err != nil {
		t.Fatalf("serve over a stale socket file: %v", err)
	}

	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--socket", path, "/healthz"}, 0},
		{[]string{"--socket", path, "/readyz"}, 1},
		{[]string{"--socket", path, "/readyz/synced"}, 1},
		{[]string{"--socket", filepath.Join(dir, "none.sock"), "/healthz"}, 1},
		{[]string{"/healthz"}, 2},
		{[]string{"--socket", path}, 2},
	} {
		if code, out := probeRun(tc.args...); code != tc.want {
			t.Errorf("zerodrop probe %v: exit %d (%s), want %d", tc.args, code, out, tc.want)
		}
	}
	ready.Store(true)
	if code, out := probeRun("--socket", path, "/readyz"); code != 0 || !strings.Contains(out, "200") {
		t.Errorf("ready: exit %d (%s), want 0", code, out)
	}
	if ln, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another process answers") {
		t.Errorf("a second server on a live socket: %v, want refused", err)
		if ln != nil {
			ln.Close()
		}
	}
	if code, _ := probeRun("--socket", path, "/readyz"); code != 0 {
		t.Errorf("after the refused second server, the first no longer answers: exit %d", code)
	}
}
