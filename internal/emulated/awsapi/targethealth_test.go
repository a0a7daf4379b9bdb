package awsapi

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// checks answers health checks from a schedule: failing from each listed
// second (inclusive) to the next toggle.
func checks(toggles ...int) func(time.Time) CheckResult {
	return func(t time.Time) CheckResult {
		ok := true
		for _, s := range toggles {
			if !t.Before(at(s)) {
				ok = !ok
			}
		}
		if ok {
			return CheckResult{OK: true, HTTPCode: 200}
		}
		return CheckResult{HTTPCode: 503}
	}
}

func TestLifeStates(t *testing.T) {
	type probe struct {
		sec    int
		state  State
		reason Reason
		gone   bool // not registered at that time
	}
	cases := []struct {
		name    string
		spec    CheckSpec
		check   func(time.Time) CheckResult
		dereg   int // second of DeregisterTargets; -1: never
		delay   time.Duration
		advance int // Advance to this second before probing
		want    []probe
	}{{
		name: "local check: registration delay, then two passes", spec: LocalCheck, check: checks(), dereg: -1,
		delay: DefaultDeregistrationDelay, advance: 200,
		want: []probe{
			{sec: 0, state: StateInitial, reason: ReasonRegistrationInProgress},
			{sec: 59, state: StateInitial, reason: ReasonRegistrationInProgress},
			{sec: 60, state: StateInitial, reason: ReasonInitialHealthChecking}, // first check passes: 1 of 2
			{sec: 69, state: StateInitial, reason: ReasonInitialHealthChecking},
			{sec: 70, state: StateHealthy}, // second pass
			{sec: 200, state: StateHealthy},
		},
	}, {
		name: "cluster check needs three passes 30 s apart", spec: ClusterCheck, check: checks(), dereg: -1,
		delay: DefaultDeregistrationDelay, advance: 200,
		want: []probe{
			{sec: 60, state: StateInitial, reason: ReasonInitialHealthChecking},
			{sec: 119, state: StateInitial, reason: ReasonInitialHealthChecking},
			{sec: 120, state: StateHealthy},
		},
	}, {
		name: "failing from the start: unhealthy after the unhealthy threshold", spec: LocalCheck, check: checks(0), dereg: -1,
		delay: DefaultDeregistrationDelay, advance: 100,
		want: []probe{
			{sec: 69, state: StateInitial, reason: ReasonInitialHealthChecking},
			{sec: 70, state: StateUnhealthy, reason: ReasonFailedHealthChecks},
		},
	}, {
		name: "healthy, fails at 100, back at 150", spec: LocalCheck, check: checks(100, 150), dereg: -1,
		delay: DefaultDeregistrationDelay, advance: 300,
		want: []probe{
			{sec: 100, state: StateHealthy}, // one failure of two
			{sec: 109, state: StateHealthy},
			{sec: 110, state: StateUnhealthy, reason: ReasonFailedHealthChecks},
			{sec: 159, state: StateUnhealthy, reason: ReasonFailedHealthChecks},
			{sec: 160, state: StateHealthy},
		},
	}, {
		name: "deregistered while healthy: draining for the delay, then gone", spec: LocalCheck, check: checks(), dereg: 100,
		delay: DefaultDeregistrationDelay, advance: 1000,
		want: []probe{
			{sec: 99, state: StateHealthy},
			{sec: 100, state: StateDraining, reason: ReasonDeregistrationInProgress},
			{sec: 399, state: StateDraining, reason: ReasonDeregistrationInProgress},
			{sec: 400, gone: true},
		},
	}, {
		name: "deregistered before checks start: no health checking ever", spec: LocalCheck, check: checks(), dereg: 10,
		delay: 0, advance: 1000,
		want: []probe{
			{sec: 5, state: StateInitial, reason: ReasonRegistrationInProgress},
			{sec: 10, gone: true},
			{sec: 60, gone: true},
		},
	}, {
		name: "checks run late (Advance after Deregister) still land before draining", spec: LocalCheck, check: checks(), dereg: 95,
		delay: 30 * time.Second, advance: -1,
		want: []probe{
			{sec: 70, state: StateHealthy},
			{sec: 95, state: StateDraining, reason: ReasonDeregistrationInProgress},
			{sec: 125, gone: true},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLife(t0, DefaultRegistrationDelay)
			if c.advance >= 0 && c.dereg >= 0 {
				l.Advance(at(c.dereg), c.spec, c.check)
			}
			if c.dereg >= 0 {
				l.Deregister(at(c.dereg), c.delay)
			}
			end := c.advance
			if end < 0 {
				end = 1000
			}
			l.Advance(at(end), c.spec, c.check)
			for _, p := range c.want {
				s, ok := l.StatusAt(at(p.sec))
				if p.gone {
					if ok {
						t.Errorf("at %ds: %+v, want not registered", p.sec, s)
					}
					continue
				}
				if !ok || s.State != p.state || s.Reason != p.reason {
					t.Errorf("at %ds: %+v (registered %v), want %s %s", p.sec, s, ok, p.state, p.reason)
				}
				if s.State != StateHealthy && s.Description == "" {
					t.Errorf("at %ds: %s without a description", p.sec, s.Reason)
				}
			}
		})
	}
}

func TestLifeHTTPFailureDescription(t *testing.T) {
	l := NewLife(t0, 0)
	l.Advance(at(100), LocalCheck, checks(0))
	s, _ := l.StatusAt(at(100))
	if s.Reason != ReasonFailedHealthChecks || s.Description != "Health checks failed with these codes: [503]" {
		t.Fatalf("status %+v", s)
	}
}

func TestLifeDeregisterTwiceKeepsFirst(t *testing.T) {
	l := NewLife(t0, 0)
	l.Deregister(at(10), 300*time.Second)
	l.Deregister(at(20), 0)
	if l.Gone(at(309)) || !l.Gone(at(310)) {
		t.Fatalf("draining should end at 310 s: %+v", l.History())
	}
}

func TestReceiving(t *testing.T) {
	a, b := Target{ID: "i-a", Port: 30080}, Target{ID: "i-b", Port: 30080}
	healthy := func() *Life { // healthy from 70 s
		l := NewLife(t0, DefaultRegistrationDelay)
		l.Advance(at(2000), LocalCheck, checks())
		return l
	}
	failingAt := func(s int) *Life { // healthy from 70 s, unhealthy from s+10
		l := NewLife(t0, DefaultRegistrationDelay)
		l.Advance(at(2000), LocalCheck, checks(s))
		return l
	}
	drained := func(s int) *Life { // healthy, deregistered at s with the default delay
		l := NewLife(t0, DefaultRegistrationDelay)
		l.Advance(at(s), LocalCheck, checks())
		l.Deregister(at(s), DefaultDeregistrationDelay)
		return l
	}
	cases := []struct {
		name    string
		members []Member
		sec     int
		prop    time.Duration
		want    []Target
	}{
		{"both initial: none", []Member{{a, NewLife(t0, 60*time.Second)}, {b, NewLife(t0, 60*time.Second)}}, 30, 0, nil},
		{"both healthy", []Member{{a, healthy()}, {b, healthy()}}, 100, 0, []Target{a, b}},
		{"one unhealthy: the healthy one", []Member{{a, failingAt(100)}, {b, healthy()}}, 200, 0, []Target{b}},
		{"all unhealthy: fail open to them", []Member{{a, failingAt(100)}, {b, failingAt(100)}}, 200, 0, []Target{a, b}},
		{"unhealthy but within propagation: still both", []Member{{a, failingAt(100)}, {b, healthy()}}, 120, DefaultPropagation, []Target{a, b}},
		{"unhealthy past propagation: the healthy one", []Member{{a, failingAt(100)}, {b, healthy()}}, 146, DefaultPropagation, []Target{b}},
		{"draining gets none", []Member{{a, drained(100)}, {b, healthy()}}, 101, 0, []Target{b}},
		{"draining within propagation still gets new connections", []Member{{a, drained(100)}, {b, healthy()}}, 130, DefaultPropagation, []Target{a, b}},
		{"only a draining target: none (not fail-open)", []Member{{a, drained(100)}}, 200, 0, nil},
		{"healthy target not yet seen by the data plane", []Member{{a, healthy()}}, 80, DefaultPropagation, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Receiving(c.members, at(c.sec), c.prop)
			if !slices.Equal(got, c.want) {
				t.Fatalf("Receiving at %ds = %v, want %v", c.sec, got, c.want)
			}
		})
	}
}
