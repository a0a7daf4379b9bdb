package aws

import (
	"net/netip"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/awsdp"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// What no gate can prevent on AWS: with connection termination on
// unhealthy targets (AWS's default, which the CCM cannot change), the
// data plane resets a target's established connections when the target
// turns unhealthy — with Local, when its node's last pod starts
// terminating. The world watches the data plane's programmed targets of
// the workload's listener through the act, notes each turn to reset, and
// counts the act's failures that ended with a reset within a moment of one
// apart from the others (docs/aws.md, "What gate-only cannot fix"). A
// connection whose handshake straddles the turn ends that way too: the
// target's SYN-ACK is already an established packet to reset, and the
// client's SYN, sent again a second later, is answered with the reset —
// to the client a refused connection — unless the data plane forgot the
// entry by then (awsdp's conntrack.go). The reset answers the packet's
// sender, so a packet of the target's (an answer, a SYN-ACK) resets the
// target's end alone: a request waiting for its answer at the turn hears
// nothing more and ends at its timeout, which counts as the turn's when
// the request was in flight at it.

// The moment around a turn to reset in which a reset the clients saw is
// the health check's: the watch reads the programmed state every
// resetPoll, after the ruleset took it; a WebSocket sends every 200 ms, a
// request in flight gets the reset at once and a handshake at its SYN's
// first retransmission (1 s), so the client sees it within resetAfter. A
// request that timed out was in flight at the turn when it ended within
// timeoutAfter of it (it began traffic.IOTimeout before its end; the
// recorder reads the clock after the timer fired, up to a poll late).
const (
	resetPoll    = 100 * time.Millisecond
	resetBefore  = 2 * resetPoll
	resetAfter   = 2 * time.Second
	timeoutAfter = traffic.IOTimeout + resetBefore
)

// resetWatch notes when the data plane turned a target of one listener to
// reset.
type resetWatch struct {
	mu     sync.Mutex
	onsets []time.Time
	stop   func()
}

// watch polls targets (the listener's programmed targets) every resetPoll
// until stopped.
func (w *resetWatch) watch(targets func() ([]awsdp.Target, error)) {
	quit, done := make(chan struct{}), make(chan struct{})
	w.stop = func() { close(quit); <-done }
	go func() {
		defer close(done)
		was := map[netip.AddrPort]bool{}
		if ts, err := targets(); err == nil {
			for _, t := range ts {
				was[t.Addr] = t.Reset
			}
		}
		tick := time.NewTicker(resetPoll)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			ts, err := targets()
			if err != nil {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			w.onsets = append(w.onsets, turnedReset(was, ts, now)...)
			w.mu.Unlock()
		}
	}()
}

// turnedReset updates was (each target's reset, by address) from ts and
// returns now once for each target that turned to reset since.
func turnedReset(was map[netip.AddrPort]bool, ts []awsdp.Target, now time.Time) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if t.Reset && !was[t.Addr] {
			out = append(out, now)
		}
		was[t.Addr] = t.Reset
	}
	return out
}

// end stops the watch and returns the turns it saw.
func (w *resetWatch) end() []time.Time {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.onsets
}

// healthCheckResets counts the failures (At from start) that ended with a
// reset (a reset connection, or a refused one: a reset answering the SYN)
// within [onset−resetBefore, onset+resetAfter] of a turn to reset, and the
// requests that timed out within [onset−resetBefore, onset+timeoutAfter]:
// in flight at the turn.
func healthCheckResets(onsets []time.Time, start time.Time, failures []traffic.Failure) report.AWSResets {
	r := report.AWSResets{Unhealthy: len(onsets)}
	for _, f := range failures {
		after := resetAfter
		switch {
		case f.Kind == traffic.KindReset || f.Kind == traffic.KindRefused:
		case f.Kind == traffic.KindTimeout && f.Source == "request":
			after = timeoutAfter
		default:
			continue
		}
		at := start.Add(f.At)
		for _, o := range onsets {
			if !at.Before(o.Add(-resetBefore)) && !at.After(o.Add(after)) {
				if f.Source == "long" {
					r.LongConns++
				} else {
					r.Requests++
				}
				break
			}
		}
	}
	return r
}
