package testutil

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// StartGroup starts cmd in a process group of its own and, when the test
// ends, kills the whole group — HAProxy's workers, the program `ip netns
// exec` or setpriv execs — and waits for cmd, at most 30 s. The channel is
// closed once cmd has exited.
func StartGroup(t testing.TB, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not end 30 s after SIGKILL", cmd.Path)
		}
	})
	return done
}
