package scenarios

import (
	"reflect"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// TestClassifyTimed: a timed WebSocket counts for the node whose host it
// came from, through that node's old pod when opened before the old pod
// began terminating and still open when the node's replacement began; it
// ended before the bound when its lifetime was up before the old pod's
// deletion plus the bound.
func TestClassifyTimed(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	const bound = 60 * time.Second
	hosts := map[string]string{"198.18.1.2": "lab-lb-1", "198.18.2.2": "lab-lb-2"}
	conn := func(peer string, opened float64, life time.Duration, broken bool) *traffic.TimedConn {
		return &traffic.TimedConn{Peer: peer + ":1234", Opened: at(opened), Lifetime: life, Broken: broken}
	}
	// lab-lb-1's replacement begins at 10 s, its old pod terminates at 20 s
	// (bound up at 80 s); lab-lb-2's at 30 s and 40 s.
	nodes := func() []report.NodeUpdate {
		return []report.NodeUpdate{
			{Node: "lab-lb-1", StartSeconds: 10, OldDeletedSeconds: 20},
			{Node: "lab-lb-2", StartSeconds: 30, OldDeletedSeconds: 40},
		}
	}
	for _, tc := range []struct {
		name string
		c    *traffic.TimedConn
		want report.UpdateFigures
		// node's through-old and broken counts
		old, oldBroken [2]int
	}{
		{"ends before the bound, broken", conn("198.18.1.2", 5, 50*time.Second, true),
			report.UpdateFigures{EndedBeforeBound: 1, EndedBeforeBoundBroken: 1}, [2]int{1, 0}, [2]int{1, 0}},
		{"open at the bound", conn("198.18.1.2", 5, 100*time.Second, false),
			report.UpdateFigures{OpenAtBound: 1}, [2]int{1, 0}, [2]int{}},
		{"ended before its node's replacement began", conn("198.18.2.2", 5, 20*time.Second, false),
			report.UpdateFigures{EndedBeforeReplacement: 1}, [2]int{}, [2]int{}},
		{"opened through the new pod", conn("198.18.1.2", 21, time.Second, true),
			report.UpdateFigures{ThroughNew: 1, ThroughNewBroken: 1}, [2]int{}, [2]int{}},
		{"opened during the surge, before the old pod terminated", conn("198.18.2.2", 35, 10*time.Second, false),
			report.UpdateFigures{EndedBeforeBound: 1}, [2]int{0, 1}, [2]int{}},
		{"no data-plane host", conn("10.0.0.1", 5, time.Second, true),
			report.UpdateFigures{UnknownNode: 1, UnknownNodeBroken: 1}, [2]int{}, [2]int{}},
		{"handshake failed", &traffic.TimedConn{Lifetime: time.Second, Broken: true},
			report.UpdateFigures{UnknownNode: 1, UnknownNodeBroken: 1}, [2]int{}, [2]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := report.UpdateFigures{Nodes: nodes()}
			classifyTimed(&f, []*traffic.TimedConn{tc.c}, start, bound, hosts)
			for i, n := range f.Nodes {
				if n.WebSocketsThroughOld != tc.old[i] || n.WebSocketsBroken != tc.oldBroken[i] {
					t.Errorf("%s: through the old pod %d (broken %d), want %d (%d)", n.Node, n.WebSocketsThroughOld, n.WebSocketsBroken, tc.old[i], tc.oldBroken[i])
				}
			}
			tc.want.WebSockets = 1
			if f.Nodes = nil; !reflect.DeepEqual(f, tc.want) {
				t.Errorf("got %+v\nwant %+v", f, tc.want)
			}
		})
	}
}

// TestAttributeWindows: a second's failed requests (its count, less the
// long connections' breaks and the client's stalls of that second) count
// for the node whose window (and IOTimeout after it) its middle falls in,
// the latest begun when windows overlap; a long connection's break for the
// window it falls in.
func TestAttributeWindows(t *testing.T) {
	nodes := []report.NodeUpdate{{Node: "a", StartSeconds: 10, EndSeconds: 20}, {Node: "b", StartSeconds: 30, EndSeconds: 40},
		// c's window begins as b's ends: b's last seconds are c's.
		{Node: "c", StartSeconds: 40, EndSeconds: 50}}
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	seconds := make([]traffic.Bucket, 60)
	seconds[5].Failures = 1  // before any window
	seconds[15].Failures = 3 // a: 2 requests and a long break
	seconds[21].Failures = 1 // a, within IOTimeout of its end
	seconds[35].Failures = 2 // b: one request and one stall
	seconds[41].Failures = 4 // c: 3 requests and a long break
	seconds[55].Failures = 1 // after every window
	attributeWindows(nodes, []traffic.Failure{
		{At: s(15.2), Source: "long", Kind: traffic.KindNoClose},
		{At: s(35.5), Source: "request", Kind: traffic.KindLate, Detail: "started 150ms after its slot (the client's timer fired late)"},
		{At: s(41.5), Source: "long", Kind: traffic.KindReset},
	}, seconds)
	got := [][2]int64{}
	for _, n := range nodes {
		got = append(got, [2]int64{n.FailedRequests, n.BrokenLongConns})
	}
	if want := [][2]int64{{3, 1}, {1, 0}, {3, 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("failed and broken per node %v, want %v", got, want)
	}
}
