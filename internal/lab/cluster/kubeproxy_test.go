package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// TestKubeProxyStartedAgain: a kube-proxy that exits (as it does when its
// Node's addresses change) runs again, as under a kubelet, and once the
// network closes an exit is final. Real processes stand in for kube-proxy:
// the first exits at once with kube-proxy's code, the next ones run.
func TestKubeProxyStartedAgain(t *testing.T) {
	dir := t.TempDir()
	n := &Network{kubeProxyStop: make(chan struct{})}
	var mu sync.Mutex
	var started []*netlab.Process
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range started {
			p.Stop()
		}
	})
	k := &kubeProxy{node: NodeName(1), log: filepath.Join(dir, "kube-proxy.log")}
	start := func() (*netlab.Process, error) {
		mu.Lock()
		defer mu.Unlock()
		script := "echo second; exec sleep 300"
		if len(started) == 0 {
			script = "echo first; exit 1"
		}
		f, err := os.OpenFile(k.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		p, err := supervisor.Start(supervisor.Spec{Name: "sh", Args: []string{"-c", script}, Stdout: f, Stderr: f})
		if err == nil {
			started = append(started, p)
		}
		return p, err
	}
	var err error
	if k.p, err = start(); err != nil {
		t.Fatal(err)
	}
	n.kubeProxies = []*kubeProxy{k}
	var logs strings.Builder
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	}
	n.kubeProxyWG.Add(1)
	go n.keepKubeProxy(k, start, logf)

	// Running again, and its first line in the log after its
	// predecessor's (the log is appended to, not replaced).
	deadline := time.Now().Add(time.Minute)
	for {
		p, restarts := k.current()
		if restarts == 1 && !p.Exited() && strings.Contains(n.KubeProxyState(0), "second") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy not running again within a minute: %s", n.KubeProxyState(0))
		}
		time.Sleep(50 * time.Millisecond)
	}
	state := n.KubeProxyState(0)
	for _, want := range []string{"running (pid", "started again 1 times", "first\nsecond"} {
		if !strings.Contains(state, want) {
			t.Errorf("KubeProxyState = %q, want %q in it", state, want)
		}
	}
	logMu.Lock()
	if got := logs.String(); !strings.Contains(got, "kube-proxy on lab-node-000001 exited (code 1): starting it again in 1s") {
		t.Errorf("lab log %q: want the exit and the restart told", got)
	}
	logMu.Unlock()

	// Closed: the keeper has ended (stopKubeProxies waits for it), so the
	// running one's exit, the lab's Close stopping it, is final.
	n.stopKubeProxies()
	p, _ := k.current()
	if err := p.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(started) != 2 {
		t.Errorf("%d processes started, want 2 (none after the network closed)", len(started))
	}
}
