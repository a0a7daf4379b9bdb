package haproxyrun

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// asCommand, in the environment, makes the test binary `zerodrop`: the
// command under test starts the validator as `<own executable> haproxy
// validator …`.
const asCommand = "ZERODROP_HAPROXYRUN_TEST_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) != "" && len(os.Args) > 1 && os.Args[1] == "haproxy" {
		os.Exit(Run(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// runCommand runs `zerodrop haproxy --dir dir` (the test binary as the
// command) in a process group of its own, killed at the end, and waits for
// HAProxy's master socket. It returns the master's PID: the command's own,
// which it became.
func runCommand(t *testing.T, dir string) int {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "command.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "haproxy", "--dir="+dir, "--worker-user=")
	cmd.Env = append(os.Environ(), asCommand+"=1")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("command's output:\n%s", b)
		}
	})
	waitUntil(t, "HAProxy's master to answer", func() bool {
		reply, err := exchange(filepath.Join(dir, "master.sock"), "show proc\n")
		return err == nil && strings.Contains(reply, "worker")
	})
	return cmd.Process.Pid
}

// TestValidatorBesideHAProxy: `zerodrop haproxy` leaves a validator
// beside the HAProxy master it becomes — the master's child, so in its
// container and under its memory limit — which checks the state
// directory's configurations with `haproxy -c` on the validation socket:
// a good one passes, a refused one comes back with HAProxy's reason, a
// file elsewhere is not read. The validator's end does not end HAProxy,
// and the master's end ends the validator.
func TestValidatorBesideHAProxy(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy binary")
	}
	dir := filepath.Join(t.TempDir(), "haproxy")
	master := runCommand(t, dir)
	validator := childOf(t, master, ValidatorCommand)
	if validator == 0 {
		t.Fatalf("no validator among the children of HAProxy's master %d", master)
	}

	sock := haproxy.ValidationSocket(dir)
	good := filepath.Join(dir, "haproxy.cfg")
	if reply, err := exchange(sock, good+"\n"); err != nil || reply != "ok\n" {
		t.Errorf("the prepared configuration: %q, %v; want ok", reply, err)
	}
	bad := filepath.Join(dir, "haproxy.cfg.new")
	if err := os.WriteFile(bad, []byte("global\n    no-such-keyword 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if reply, err := exchange(sock, bad+"\n"); err != nil || !strings.HasPrefix(reply, "rejected\n") || !strings.Contains(reply, "no-such-keyword") {
		t.Errorf("a configuration HAProxy refuses: %q, %v; want rejected, with HAProxy's reason", reply, err)
	}
	outside := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(outside, []byte("global\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if reply, err := exchange(sock, outside+"\n"); err != nil || !strings.HasPrefix(reply, "error\n") {
		t.Errorf("a file outside the state directory: %q, %v; want error", reply, err)
	}

	// The validator killed: HAProxy serves on.
	workers, _ := exchange(filepath.Join(dir, "master.sock"), "show proc\n")
	if err := syscall.Kill(validator, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the killed validator to end", func() bool { return !alive(validator) })
	time.Sleep(300 * time.Millisecond)
	if now, err := exchange(filepath.Join(dir, "master.sock"), "show proc\n"); err != nil || workerLines(now) != workerLines(workers) {
		t.Errorf("HAProxy after its validator's end: %v\n%s\nwant, as before:\n%s", err, now, workers)
	}

	// Another command: its master killed, its validator ends too.
	dir2 := filepath.Join(t.TempDir(), "haproxy")
	master2 := runCommand(t, dir2)
	validator2 := childOf(t, master2, ValidatorCommand)
	if validator2 == 0 {
		t.Fatalf("no validator among the children of HAProxy's master %d", master2)
	}
	if err := syscall.Kill(master2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the validator to end with its master", func() bool { return !alive(validator2) })
}

// exchange sends request on the unix socket path and reads the reply to
// its end.
func exchange(path, request string) (string, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		return "", err
	}
	if uc, ok := c.(*net.UnixConn); ok && strings.HasPrefix(request, "show") {
		_ = uc.CloseWrite() // the master CLI answers once the client half-closes
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// workerLines are the PIDs and roles of `show proc`, without uptimes.
func workerLines(showProc string) string {
	var b strings.Builder
	for _, line := range strings.Split(showProc, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
			fmt.Fprintf(&b, "%s %s\n", f[0], f[1])
		}
	}
	return b.String()
}

// childOf is the PID of a child of parent whose command line contains arg
// (0: none).
func childOf(t *testing.T, parent int, arg string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:])) // state, ppid, …
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00"+arg+"\x00")) {
			return pid
		}
	}
	return 0
}

// alive: pid is a process that has not ended (a zombie has).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
