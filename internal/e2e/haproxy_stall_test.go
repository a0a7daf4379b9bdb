package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestHAProxyGateMasterStopped is issue 18's "HAProxy master busy during
// drains" on the real apiserver and a real HAProxy. A pod is deleted and its
// preStop drain call made while HAProxy still sends it new connections; once
// the gate has read that, the HAProxy master is stopped (SIGSTOP) with a
// reload queued on its socket. The controller drains the pod's server at run
// time all the same (the worker's admin socket needs no master), while the
// gate cannot read HAProxy (Backends asks the master for the old workers'
// connections) and keeps looking. When the master resumes, the queued reload
// replaces the worker; the call answers "drained", after the last instant
// HAProxy was seen sending the pod new connections, and the new worker does
// not send the pod new connections (its server in drain, or removed at zero
// connections): they reach only the other pod.
func TestHAProxyGateMasterStopped(t *testing.T) {
	w := newStallWorld(t, "stall", 7, "a", "b")
	answered, stopWatch := w.deleteAndCall(t, "stall-b")
	eventually(t, 30*time.Second, "the gate to read HAProxy", func() (bool, string) {
		return w.reads.ok.Load() > 0, "no successful read yet"
	})
	_, w0, resume := w.stopMaster(t)
	queued := queueReload(t, w.dir)

	w.slice(t, "stall-b")
	eventually(t, 60*time.Second, "HAProxy draining pod B with its master stopped", func() (bool, string) {
		st := w.status(t, "stall-b")
		return st == "DRAIN", st
	})
	resume()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the queued reload: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the queued reload never ran")
	}
	drainedAnswer(t, "stall-b", answered, stopWatch)
	// The worker that serves now is the one the queued reload started, and
	// it does not send pod B new connections: the server is in drain (or
	// already removed, at zero connections).
	eventually(t, 30*time.Second, "the new worker serving", func() (bool, string) {
		_, ws, _, err := w.prov.Procs(context.Background())
		return err == nil && len(ws) == 1 && !slices.Contains(w0, ws[0]) && adminSocketAnsweredBy(w.dir, ws[0]), fmt.Sprint(ws, err)
	})
	w.notSent(t, "stall-b")
	w.onlyTo(t, 10, "stall-a")
}

// TestHAProxySecondDrainMasterStopped: one pod of the Service is already
// draining (its drain call answered; a long-lived connection keeps its server
// in drain) when the HAProxy master stops; then a
// second pod is deleted. The controller reads the connection counts of the
// draining one (Backends, which needs the master) and cannot; it must still
// drain the second pod's server, which needs only the worker, while the
// master is stopped: a pod whose drain waited for the master would, at its
// gate's bound, stop while HAProxy still sends it new connections. When the
// master resumes, the second call answers "drained", after the last instant
// HAProxy was seen sending that pod new connections.
func TestHAProxySecondDrainMasterStopped(t *testing.T) {
	w := newStallWorld(t, "second", 8, "a", "b", "c")
	// A connection of B's keeps its server draining, not removed.
	long := w.longTo(t, "second-b")
	answeredB, stopWatchB := w.deleteAndCall(t, "second-b")
	w.slice(t, "second-b")
	drainedAnswer(t, "second-b", answeredB, stopWatchB)

	_, _, resume := w.stopMaster(t)
	answeredC, stopWatchC := w.deleteAndCall(t, "second-c")
	w.slice(t, "second-b", "second-c")
	eventually(t, 90*time.Second, "HAProxy draining pod C with its master stopped", func() (bool, string) {
		st := w.status(t, "second-c")
		return st == "DRAIN", st
	})
	resume()
	drainedAnswer(t, "second-c", answeredC, stopWatchC)
	w.notSent(t, "second-b")
	w.notSent(t, "second-c")
	w.onlyTo(t, 10, "second-a")
	if got, err := long.roundTrip(); err != nil || got != "second-b" {
		t.Fatalf("pod B's long-lived connection after the master resumed: %q, %v", got, err)
	}
}
