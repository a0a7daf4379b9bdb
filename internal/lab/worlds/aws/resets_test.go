package aws

import (
	"net/netip"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/awsdp"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// TestTurnedReset: a turn is a target going from not reset to reset, once,
// whichever target it is; a target already reset at the start is no turn.
func TestTurnedReset(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.1:30080"), netip.MustParseAddrPort("10.0.0.2:30080")
	was := map[netip.AddrPort]bool{b: true}
	now := time.Unix(100, 0)
	for i, step := range []struct {
		ts   []awsdp.Target
		want int
	}{
		{[]awsdp.Target{{Addr: a}, {Addr: b, Reset: true}}, 0},
		{[]awsdp.Target{{Addr: a, Reset: true}, {Addr: b, Reset: true}}, 1},
		{[]awsdp.Target{{Addr: a, Reset: true}, {Addr: b}}, 0},
		{[]awsdp.Target{{Addr: a}, {Addr: b, Reset: true}}, 1},
		{[]awsdp.Target{{Addr: a, Reset: true}, {Addr: b, Reset: true}}, 1},
	} {
		if got := turnedReset(was, step.ts, now); len(got) != step.want {
			t.Errorf("step %d: %d turns, want %d", i, len(got), step.want)
		}
	}
}

// TestHealthCheckResets: only resets (and refusals: a reset answering a
// SYN sent again) within the moment around a turn, and requests that timed
// out in flight at a turn (their target's answer reset), are the health
// check's, requests and WebSockets apart; a reset far from any turn, a
// request that timed out before a turn or began after it, a WebSocket's
// lost echo, or a 5xx at a turn, is not.
func TestHealthCheckResets(t *testing.T) {
	start := time.Unix(1000, 0)
	onsets := []time.Time{start.Add(10 * time.Second), start.Add(40 * time.Second)}
	f := func(at time.Duration, source, kind string) traffic.Failure {
		return traffic.Failure{At: at, Source: source, Kind: kind}
	}
	got := healthCheckResets(onsets, start, []traffic.Failure{
		f(10*time.Second+300*time.Millisecond, "request", traffic.KindReset),    // at the first turn
		f(10*time.Second+900*time.Millisecond, "long", traffic.KindReset),       // a WebSocket's next message
		f(40*time.Second-100*time.Millisecond, "long", traffic.KindReset),       // seen a poll early
		f(10*time.Second+1300*time.Millisecond, "request", traffic.KindRefused), // a handshake's SYN sent again
		f(10*time.Second+1950*time.Millisecond, "request", traffic.KindTimeout), // began 50 ms before the turn
		f(40*time.Second+2100*time.Millisecond, "request", traffic.KindTimeout), // its timer read late
		f(10*time.Second-300*time.Millisecond, "request", traffic.KindTimeout),  // ended before the turn
		f(40*time.Second+2300*time.Millisecond, "request", traffic.KindTimeout), // began after it
		f(10*time.Second+500*time.Millisecond, "long", traffic.KindLost),
		f(10*time.Second+400*time.Millisecond, "request", traffic.Kind5xx),
		f(25*time.Second, "request", traffic.KindReset), // no turn near
		f(43*time.Second, "long", traffic.KindReset),    // past the moment
	})
	if got.Unhealthy != 2 || got.Requests != 4 || got.LongConns != 2 {
		t.Errorf("%+v, want 2 turns, 4 requests and 2 WebSockets ended by them", got)
	}
}
