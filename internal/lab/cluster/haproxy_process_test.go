package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHAProxyWrapper runs the wrapper's script with printf as the command:
// the master CLI socket's path is moved to PATH.haproxy, once (a reload
// runs the wrapper again with the moved path), and other arguments pass as
// they are.
func TestHAProxyWrapper(t *testing.T) {
	run := func(args ...string) []string {
		out, err := exec.Command("sh", append([]string{"-c", HAProxyWrapper(`printf '%s\n'`), "haproxy"}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	got := run("-W", "-S", "/d/master.sock,level,admin", "-f", "/d/haproxy.cfg")
	want := []string{"-W", "-S", "/d/master.sock.haproxy,level,admin", "-f", "/d/haproxy.cfg"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
	if again := run(got...); strings.Join(again, " ") != strings.Join(want, " ") {
		t.Errorf("run again: got %q, want %q", again, want)
	}
	if got := run("-S", "/d/master.sock"); got[1] != "/d/master.sock.haproxy" {
		t.Errorf("a path without options: got %q", got)
	}
}
