package haproxy

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStopWithoutMasterSocket: a provider that owns its HAProxy stops it on
// Close even when the master CLI does not answer (a reload under way, or the
// socket file gone): the pid file names the master. Before, Close returned
// an error and left master and workers running.
func TestStopWithoutMasterSocket(t *testing.T) {
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	master, workers, _, err := p.Procs(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.away")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	pids := append([]int{master}, workers...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var alive []int
		for _, pid := range pids {
			if p.alive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("HAProxy processes %v still run after Close with the master socket gone", alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
