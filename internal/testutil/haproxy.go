package testutil

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// StopHAProxy stops the HAProxy owned in dir and fails the test when any
// HAProxy process of dir is still alive afterwards: an owned HAProxy runs in
// its own session on purpose, so a leak outlives the test and, with
// SO_REUSEPORT, takes connections meant for the next one. Leftovers are
// killed so that one failure does not cascade.
func StopHAProxy(t testing.TB, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := haproxy.StopDir(ctx, dir); err != nil {
		t.Errorf("stop HAProxy of %s: %v", dir, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := haproxyProcs(dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("HAProxy processes %v of %s still alive after stop; killing them", left, dir)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// haproxyProcs lists the live haproxy processes whose command line names dir.
func haproxyProcs(dir string) []int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, path := range paths {
		cmdline, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(cmdline, []byte("haproxy")) || !bytes.Contains(cmdline, []byte(dir+"/")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(path), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
