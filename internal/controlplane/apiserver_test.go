package controlplane

import (
	"os"
	"testing"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// TestAPIServerPID finds the kube-apiserver this process started, by its
// port, and no process for a port no API server serves.
func TestAPIServerPID(t *testing.T) {
	env := StartEnv(t)
	pid, err := APIServerPID(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range supervisor.Processes() {
		if p.PID == pid {
			found = true
			if p.PPID != os.Getpid() || len(p.Args) == 0 {
				t.Errorf("pid %d: parent %d, args %q; want the kube-apiserver this test started", pid, p.PPID, p.Args)
			}
		}
	}
	if !found {
		t.Fatalf("pid %d is not in the process table", pid)
	}
	if pid, err := APIServerPID("https://127.0.0.1:1/"); err == nil {
		t.Errorf("port 1: pid %d, want an error", pid)
	}
	if _, err := APIServerPID("https://127.0.0.1/"); err == nil {
		t.Error("no port: want an error")
	}
}
