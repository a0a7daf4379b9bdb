package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopEndsTheGroup: a process that ignores SIGTERM is killed after
// the grace, and so is the child it forked.
func TestStopEndsTheGroup(t *testing.T) {
	dir := t.TempDir()
	// A duration no other sleep has, to find the child by.
	marker := fmt.Sprintf("600.%d", time.Now().UnixNano()%1000000)
	p, err := Start(Spec{Name: "sh", Args: []string{"-c", `trap "" TERM; sleep ` + marker + ` & echo started; wait`},
		Log: filepath.Join(dir, "log"), Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	child := func() []int {
		return Find(func(args []string) bool { return len(args) == 2 && args[0] == "sleep" && args[1] == marker })
	}
	for deadline := time.Now().Add(10 * time.Second); len(child()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("child not started")
		}
	}
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || p.ExitCode() != 128+int32(syscall.SIGKILL) {
		t.Fatalf("exited %v, code %d; want SIGKILLed", p.Exited(), p.ExitCode())
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("stopped in %s, before the grace", d)
	}
	for deadline := time.Now().Add(5 * time.Second); len(child()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group's child %v outlived Stop", child())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "log")); !strings.Contains(string(b), "started") {
		t.Fatalf("log %q", b)
	}
}

func TestStopTerminates(t *testing.T) {
	p, err := Start(Spec{Name: "sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Stop()
	_ = p.Stop() // idempotent
	if p.ExitCode() != 128+int32(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want SIGTERM's", p.ExitCode())
	}
}

func TestOutputCarriesStderr(t *testing.T) {
	out, err := Output(context.Background(), Command{Name: "sh", Args: []string{"-c", "echo out; echo why >&2; exit 3"}})
	if err == nil || !strings.Contains(err.Error(), "why") || !ExitError(err) || string(out) != "out\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
}

// TestOutputLoggingShowsStderr: the command's stderr reaches the log as
// well as the error, and stdout stays the answer alone.
func TestOutputLoggingShowsStderr(t *testing.T) {
	var log strings.Builder
	out, err := OutputLogging(context.Background(), Command{Name: "sh", Args: []string{"-c", "echo building >&2; echo /the/path; echo why >&2; exit 3"}}, &log)
	if err == nil || !strings.Contains(err.Error(), "why") || string(out) != "/the/path\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
	if log.String() != "building\nwhy\n" {
		t.Fatalf("log %q, want the command's stderr", log.String())
	}
}
