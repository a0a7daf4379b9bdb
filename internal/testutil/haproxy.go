package testutil

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/supervisor"
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
	return supervisor.Find(func(args []string) bool {
		joined := strings.Join(args, " ")
		return strings.Contains(joined, "haproxy") && strings.Contains(joined, dir+"/")
	})
}
