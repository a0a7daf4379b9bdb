package haproxyrun

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStop runs `zerodrop haproxy stop` against the HAProxy the command
// prepares and runs (here a child of the test, not the test's own process):
// --wait returns at once when HAProxy was not told to stop (the controller
// container restarted alone), and when it was, neither stops it nor returns
// while it runs; the soft stop
// returns once its master has exited (and the master exits 0: a soft stop,
// not a kill); with no HAProxy there is nothing to stop. A prepared
// directory holds no stopping mark.
func TestStop(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy binary")
	}
	dir := filepath.Join(t.TempDir(), "haproxy")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := RunStop([]string{"--dir", dir}, &out); code != 0 {
		t.Fatalf("stop with no HAProxy: exit %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "nothing to stop") {
		t.Fatalf("stop with no HAProxy said %q", out.String())
	}
	// The mark that stop left (as a previous container's would be) is
	// cleared by the next start.
	if _, err := os.Stat(filepath.Join(dir, "stopping")); err != nil {
		t.Fatalf("stop with no HAProxy left no mark: %v", err)
	}

	path, args, err := Prepare(Config{Dir: dir, Binary: "haproxy"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stopping")); !os.IsNotExist(err) {
		t.Fatalf("prepared directory keeps the stopping mark: %v", err)
	}
	// A file, not a pipe, so that Wait ends with the master whatever its
	// workers hold; its own process group, so that the cleanup kills them.
	log, err := os.Create(filepath.Join(t.TempDir(), "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		log.Close()
	})
	// The master answers on its socket once it runs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("unix", filepath.Join(dir, "master.sock"))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HAProxy's master never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The controller container stopped alone (a liveness restart): no
	// mark, so --wait returns and HAProxy runs on.
	out.Reset()
	if code := RunStop([]string{"--dir", dir, "--wait", "--mark-timeout", "100ms"}, &out); code != 0 {
		t.Fatalf("--wait without a soft stop: exit %d: %s", code, out.String())
	}
	// Marked (the haproxy container's hook has begun): --wait waits while
	// the master runs.
	if err := os.WriteFile(filepath.Join(dir, "stopping"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := RunStop([]string{"--dir", dir, "--wait", "--timeout", "300ms"}, &out); code != 1 {
		t.Fatalf("--wait with HAProxy marked stopping but running: exit %d, want 1 (timed out): %s", code, out.String())
	}
	select {
	case <-exited:
		t.Fatalf("HAProxy exited during --wait: %v", waitErr)
	default:
	}

	out.Reset()
	if code := RunStop([]string{"--dir", dir}, &out); code != 0 {
		t.Fatalf("stop: exit %d: %s", code, out.String())
	}
	// It returned once the master was gone: its socket refuses.
	if c, err := net.Dial("unix", filepath.Join(dir, "master.sock")); err == nil {
		c.Close()
		t.Fatalf("stop returned while HAProxy's master still answered: %s", out.String())
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("HAProxy's master after a soft stop: %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("stop returned but HAProxy's master still runs: %s", out.String())
	}
	out.Reset()
	if code := RunStop([]string{"--dir", dir, "--wait"}, &out); code != 0 {
		t.Fatalf("--wait after the stop: exit %d: %s", code, out.String())
	}
}
