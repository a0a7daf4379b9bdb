package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

// apiOutage is longer than a leader's lease (15 s by default).
const apiOutage = 20 * time.Second

// TestHAProxyGateWaitsAPIServerStopped is issue 18's "API server
// unreachable: the gates wait" on the real apiserver and a real HAProxy. A
// pod is deleted and its preStop drain call made; before its EndpointSlice
// shows it terminating, kube-apiserver is stopped (SIGSTOP) for apiOutage.
// Neither the controller nor the drain endpoint can learn more: the call must
// be held — not answered while HAProxy still sends the pod new connections —
// and HAProxy must not be written from the stale view (its configuration and
// the pod's server unchanged). When the API server resumes and the slice
// shows the pod terminating, the controller drains it, and the call answers
// "drained" after the last instant HAProxy was seen sending the pod new
// connections.
func TestHAProxyGateWaitsAPIServerStopped(t *testing.T) {
	w := newStallWorld(t, "outage", 9, "a", "b")
	answered, stopWatch := w.deleteAndCall(t, "outage-b")
	eventually(t, 30*time.Second, "the gate to read HAProxy", func() (bool, string) {
		return w.reads.ok.Load() > 0, "no successful read yet"
	})
	pid, err := controlplane.APIServerPID(w.host)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(w.dir, "haproxy.cfg")
	before, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	for end := time.Now().Add(apiOutage); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		select {
		case a := <-answered:
			t.Fatalf("the drain call answered during the API outage: %d %q (%v)", a.code, a.result, a.err)
		default:
		}
		if st := w.status(t, "outage-b"); st != "UP" {
			t.Fatalf("pod B's server is %q during the API outage, want UP: written from a stale view", st)
		}
	}
	after, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatal("HAProxy's configuration changed during the API outage")
	}
	resume()

	w.slice(t, "outage-b")
	drainedAnswer(t, "outage-b", answered, stopWatch)
	w.notSent(t, "outage-b")
	w.onlyTo(t, 10, "outage-a")
}
