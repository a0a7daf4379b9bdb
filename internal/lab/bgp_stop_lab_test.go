package lab

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// bgpStopLabEnv turns TestLabBGPSpeakerStopped on.
const bgpStopLabEnv = "ZERODROP_LAB_BGP_STOP"

// stopWithin is how long the test waits for the router to take the
// stopped speaker's node out: half the chart's graceful-restart time
// (120 s), so a speaker that stopped for a graceful restart, whose routes
// the router keeps for the whole restart time, fails the test.
const stopWithin = 60 * time.Second

// TestLabBGPSpeakerStopped: a speaker stopped by its kubelet without its
// Pod being deleted — what a node shutdown does to it — withdraws at once
// with a Cease instead of leaving its routes to the router's
// graceful-restart time (bgp.DecideStop). Two data-plane nodes behind
// FRR's hash-threshold ECMP (--router frr-ecmp), zerodrop installed from
// the chart, under restart-idle's traffic: the first of the router's next
// hops has its speaker process sent SIGTERM, its Pod left as it is. The
// router must take that node out within stopWithin, having counted a
// NOTIFICATION from it, and route it again once the lab's kubelet has
// started the speaker again (its container exited; its Pod, not deleted,
// still wants it). The node's HAProxy keeps serving here, unlike at a
// real shutdown, so the lab's failed requests and broken WebSockets (the
// withdrawal moves connections over the ECMP hash) are reported, not
// asserted. One lab of about four minutes, so it runs only when asked:
//
//	ZERODROP_LAB_BGP_STOP=1 go test -count=1 -v -run TestLabBGPSpeakerStopped ./internal/lab/
func TestLabBGPSpeakerStopped(t *testing.T) {
	if os.Getenv(bgpStopLabEnv) == "" {
		t.Skipf("set %s=1 to stop a speaker behind FRR without deleting its Pod (a node shutdown)", bgpStopLabEnv)
	}
	var sf stopFigures
	res := frrRun(t, 8*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		sf = stopSpeaker(t, ctx, lines, workDir)
	}, "--scenario", "restart-idle", "--idle-restarts", "4", "--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
	t.Logf("speaker of %s (pod %s) sent SIGTERM: next hops %v -> %v, taken out %.1fs after (%v); NOTIFICATIONs from it %d -> %d, last reset %q; its Pod kept, not deleting: %v; routed again: %v",
		sf.node, sf.pod, sf.before, sf.after, sf.out.Seconds(), sf.withdrawn, sf.notesBefore, sf.notesAfter, sf.lastReset, sf.podKept, sf.returned)
	t.Logf("the lab's traffic: %d requests, %d failed, %d long connections, %d broken", res.Requests, res.FailedRequests, res.LongConns, res.LongConnsBroken)
	sf.check(t)
}

// stopFigures are what TestLabBGPSpeakerStopped saw.
type stopFigures struct {
	node                    netip.Addr
	pod                     string
	before, after           []netip.Addr
	out                     time.Duration // from the SIGTERM until the router lacked the node
	withdrawn               bool
	notesBefore, notesAfter int // NOTIFICATIONs the router counted from the node
	lastReset               string
	podKept                 bool // the speaker's Pod still there, not deleting
	returned                bool
	done                    bool
	trafficEndedFirst       bool
}

// check asserts the behaviour (see TestLabBGPSpeakerStopped).
func (sf stopFigures) check(t *testing.T) {
	t.Helper()
	if !sf.done {
		t.Fatal("the stop did not run")
	}
	if !sf.podKept {
		t.Errorf("the speaker's Pod %s was deleted or is deleting: the test needs it untouched", sf.pod)
	}
	if !sf.withdrawn {
		t.Errorf("the router kept %s for %s after its speaker's SIGTERM (next hops %v): a graceful restart, not a withdrawal", sf.node, stopWithin, sf.after)
	}
	if sf.notesAfter <= sf.notesBefore {
		t.Errorf("the router counted no NOTIFICATION from %s (%d before, %d after; last reset %q): the session closed without the Cease", sf.node, sf.notesBefore, sf.notesAfter, sf.lastReset)
	}
	if !sf.returned {
		t.Errorf("%s was not routed again after its kubelet started the speaker again", sf.node)
	}
	if sf.trafficEndedFirst {
		t.Errorf("the lab's traffic ended before the speaker was back")
	}
}

// stopSpeaker sends SIGTERM to the speaker of the first of the router's
// next hops and watches the router take the node out and back.
func stopSpeaker(t *testing.T, ctx context.Context, lines *lineWatch, workDir string) (sf stopFigures) {
	t.Helper()
	// The lab's parts, the router's FRR and its next hops for the
	// Service's address, both nodes (TestLabBGPRestarts' opening).
	l, err := openRestartLab(ctx, lines, workDir)
	if err != nil {
		t.Error(err)
		return sf
	}
	frr := l.frr
	sf.before = l.hops
	sf.node = sf.before[0]
	speakers, err := speakerProcesses([]netip.Addr{sf.node})
	if err != nil || len(speakers) != 1 {
		t.Errorf("the speaker of %s: %v (%v)", sf.node, speakers, err)
		return sf
	}
	sf.pod = speakers[sf.node].pod
	sessions, err := frr.Sessions(ctx)
	if err != nil {
		t.Error(err)
		return sf
	}
	sf.notesBefore = sessions[sf.node].Messages.NotificationsRecv
	stopped := time.Now()
	if err := syscall.Kill(speakers[sf.node].pid, syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM to the speaker of %s: %v", sf.node, err)
		return sf
	}
	var at time.Time
	sf.after, at, sf.withdrawn = l.waitOrder(ctx, stopWithin, func(h []netip.Addr) bool { return len(h) > 0 && !slices.Contains(h, sf.node) })
	sf.out = at.Sub(stopped)
	if sessions, err = frr.Sessions(ctx); err == nil {
		sf.notesAfter, sf.lastReset = sessions[sf.node].Messages.NotificationsRecv, sessions[sf.node].LastReset
	}
	pod, err := l.kube.CoreV1().Pods(world.ControllerNamespace).Get(ctx, sf.pod, metav1.GetOptions{})
	sf.podKept = err == nil && pod.DeletionTimestamp == nil
	_, _, sf.returned = l.waitOrder(ctx, 90*time.Second, func(h []netip.Addr) bool { return len(h) == len(sf.before) })
	sf.done = true
	select {
	case <-lines.seen("traffic end"):
		sf.trafficEndedFirst = true
	default:
	}
	return sf
}
