package awsapi

import (
	"fmt"
	"slices"
	"time"
)

// Target health as a Network Load Balancer keeps it: a pure state machine
// over an injected time. Nothing here reads a clock or the network: the
// caller says what time it is (Advance, StatusAt) and a callback says what
// a health check found, so the same code serves the emulator's API, the
// lab's data plane and table tests.
//
// States, reason codes and their meaning are the API reference's
// (Elastic Load Balancing API Reference, data type TargetHealth,
// API_TargetHealth.html): initial (Elb.RegistrationInProgress,
// Elb.InitialHealthChecking), healthy (no reason), unhealthy
// (Target.FailedHealthChecks; Target.ResponseCodeMismatch and
// Target.Timeout "apply only to Application Load Balancers and Gateway Load
// Balancers", so an NLB reports every failed check as
// Target.FailedHealthChecks), draining (Target.DeregistrationInProgress),
// unused (Target.NotRegistered, Target.NotInUse). The reference gives no
// descriptions; the ones below are the strings DescribeTargetHealth returns
// as users report them (an assumption: only codes are contractual).

// State is a target's TargetHealthStateEnum.
type State string

// The states an NLB instance target goes through.
const (
	StateInitial   State = "initial"
	StateHealthy   State = "healthy"
	StateUnhealthy State = "unhealthy"
	StateDraining  State = "draining"
	StateUnused    State = "unused"
)

// Reason is a TargetHealthReasonEnum.
type Reason string

// The reason codes of the API reference's TargetHealth page.
const (
	ReasonRegistrationInProgress   Reason = "Elb.RegistrationInProgress"
	ReasonInitialHealthChecking    Reason = "Elb.InitialHealthChecking"
	ReasonFailedHealthChecks       Reason = "Target.FailedHealthChecks"
	ReasonDeregistrationInProgress Reason = "Target.DeregistrationInProgress"
	ReasonNotRegistered            Reason = "Target.NotRegistered"
	ReasonNotInUse                 Reason = "Target.NotInUse"
)

var descriptions = map[Reason]string{
	ReasonRegistrationInProgress:   "Target registration is in progress",
	ReasonInitialHealthChecking:    "Initial health checks in progress",
	ReasonFailedHealthChecks:       "Health checks failed",
	ReasonDeregistrationInProgress: "Target deregistration is in progress",
	ReasonNotRegistered:            "Target is not registered to the target group",
	ReasonNotInUse:                 "Target group is not configured to receive traffic from the load balancer",
}

// Status is what DescribeTargetHealth says of a target.
type Status struct {
	State       State
	Reason      Reason // empty when healthy
	Description string
}

func status(s State, r Reason) Status {
	return Status{State: s, Reason: r, Description: descriptions[r]}
}

// CheckResult is one health check's outcome. HTTPCode is the status an
// HTTP check got (0: no HTTP answer: refused, reset or timed out).
type CheckResult struct {
	OK       bool
	HTTPCode int
}

// CheckSpec is a target group's health check timing.
type CheckSpec struct {
	Interval           time.Duration
	HealthyThreshold   int
	UnhealthyThreshold int
}

// Defaults, each with its source. The health checks are the ones
// cloud-provider-aws v1.37.1 writes into the target groups it creates
// (pkg/providers/v1/aws.go:2178-2198 and aws_loadbalancer.go:66-74): it
// never sets deregistration_delay.timeout_seconds, so AWS's default holds.
const (
	// DefaultDeregistrationDelay is deregistration_delay.timeout_seconds'
	// default (API reference, TargetGroupAttribute: "The range is 0-3600
	// seconds. The default value is 300 seconds").
	DefaultDeregistrationDelay = 300 * time.Second
	// DefaultRegistrationDelay is how long a newly registered target stays
	// in Elb.RegistrationInProgress before health checks start: a field
	// report, not documented by AWS ("It can take a few minutes for the
	// registration process to complete and health checks to start", NLB
	// health check docs; about 60 s in aws/containers-roadmap#470 and
	// aws-load-balancer-controller#1834). A lab option.
	DefaultRegistrationDelay = 60 * time.Second
	// DefaultPropagation is how long the data plane lags the target states:
	// new connections still reach a target this long after it left
	// service (30-40 s after unhealthy, aws/containers-roadmap#470). A
	// field report, a lab option.
	DefaultPropagation = 35 * time.Second
)

// The CCM's health checks (cloud-provider-aws v1.37.1).
var (
	// LocalCheck: externalTrafficPolicy Local, HTTP /healthz on the
	// health-check node port every 10 s, thresholds 2 (aws.go:2188-2198).
	LocalCheck = CheckSpec{Interval: 10 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 2}
	// ClusterCheck: externalTrafficPolicy Cluster, TCP to the traffic port
	// every 30 s, thresholds 3 (defaultNlbHealthCheckInterval and
	// defaultNlbHealthCheckThreshold, aws_loadbalancer.go:70-72).
	ClusterCheck = CheckSpec{Interval: 30 * time.Second, HealthyThreshold: 3, UnhealthyThreshold: 3}
)

// Transition is a change of status at a time.
type Transition struct {
	At     time.Time
	Status Status
}

// Life is one registration of a target in a target group, from
// RegisterTargets to the end of its draining: the timeline of its statuses.
// A Life is a value the caller owns (no locks); it is advanced only by
// Advance and Deregister.
type Life struct {
	Registered   time.Time
	Deregistered time.Time // zero while registered
	regDelay     time.Duration
	drainEnd     time.Time
	history      []Transition
	// the checks: when the next is due, and the current run of results
	nextCheck     time.Time
	passes, fails int
}

// NewLife is a target registered at t whose health checks start after
// regDelay.
func NewLife(t time.Time, regDelay time.Duration) *Life {
	l := &Life{Registered: t, regDelay: regDelay, nextCheck: t.Add(regDelay)}
	l.history = []Transition{
		{At: t, Status: status(StateInitial, ReasonRegistrationInProgress)},
		{At: t.Add(regDelay), Status: status(StateInitial, ReasonInitialHealthChecking)},
	}
	return l
}

// Deregister starts draining at t for delay (the target group's
// deregistration delay); after it the target is gone. A second call is a
// no-op, as DeregisterTargets of a draining target is in AWS.
func (l *Life) Deregister(t time.Time, delay time.Duration) {
	if !l.Deregistered.IsZero() {
		return
	}
	l.Deregistered, l.drainEnd = t, t.Add(delay)
	l.truncate(t)
	l.history = append(l.history,
		Transition{At: t, Status: status(StateDraining, ReasonDeregistrationInProgress)},
		Transition{At: l.drainEnd, Status: status(StateUnused, ReasonNotRegistered)})
}

// truncate drops the transitions planned after t (the start of health
// checking, when a target is deregistered before it).
func (l *Life) truncate(t time.Time) {
	l.history = slices.DeleteFunc(l.history, func(tr Transition) bool { return tr.At.After(t) })
}

// Gone reports whether the target has left the group by now: its draining
// is over.
func (l *Life) Gone(now time.Time) bool {
	return !l.Deregistered.IsZero() && !now.Before(l.drainEnd)
}

// Advance runs every health check due by now, in order, each at its
// scheduled time, asking check for its result. Checks stop at
// deregistration: a draining target's health is no longer reported.
func (l *Life) Advance(now time.Time, spec CheckSpec, check func(at time.Time) CheckResult) {
	if spec.Interval <= 0 {
		panic(fmt.Sprintf("health check interval %v", spec.Interval))
	}
	for !l.nextCheck.After(now) && (l.Deregistered.IsZero() || l.nextCheck.Before(l.Deregistered)) {
		at := l.nextCheck
		l.nextCheck = at.Add(spec.Interval)
		res := check(at)
		if res.OK {
			l.passes, l.fails = l.passes+1, 0
		} else {
			l.passes, l.fails = 0, l.fails+1
		}
		cur := l.at(at).State
		switch {
		case cur != StateHealthy && l.passes >= spec.HealthyThreshold:
			l.insert(Transition{At: at, Status: status(StateHealthy, "")})
		case cur != StateUnhealthy && l.fails >= spec.UnhealthyThreshold:
			s := status(StateUnhealthy, ReasonFailedHealthChecks)
			if res.HTTPCode != 0 {
				s.Description = fmt.Sprintf("Health checks failed with these codes: [%d]", res.HTTPCode)
			}
			l.insert(Transition{At: at, Status: s})
		}
	}
}

// at is the last status set at or before t.
func (l *Life) at(t time.Time) Status {
	var s Status
	for _, tr := range l.history {
		if tr.At.After(t) {
			break
		}
		s = tr.Status
	}
	return s
}

// insert adds tr after every transition at or before its time: a check
// that ran late (Advance called after Deregister) still lands in order.
func (l *Life) insert(tr Transition) {
	i := len(l.history)
	for i > 0 && l.history[i-1].At.After(tr.At) {
		i--
	}
	l.history = slices.Insert(l.history, i, tr)
}

// StatusAt is the target's status at t as far as it has been advanced;
// ok is false before its registration and after its draining ended.
func (l *Life) StatusAt(t time.Time) (Status, bool) {
	s := l.at(t)
	if s.State == "" || s.State == StateUnused {
		return Status{}, false
	}
	return s, true
}

// History is the timeline so far (planned draining end included).
func (l *Life) History() []Transition { return slices.Clone(l.history) }

// Target is a registered target: an instance ID and the port traffic goes
// to (the node port for the CCM's instance targets).
type Target struct {
	ID   string
	Port int32
}

// Member is one target of a group with its registration: the input of
// Receiving.
type Member struct {
	Target Target
	Life   *Life
}

// Receiving is the targets that would receive new connections at t: the
// states as they were propagation earlier (the data plane lags the health
// states: a target that left service still gets new connections that
// long, containers-roadmap#470), the healthy ones; when none is healthy,
// the unhealthy ones (fail open: "If a target group contains only
// unhealthy registered targets, the load balancer routes requests to all
// those targets, regardless of their health status", ELB docs, target
// group health checks). Draining and initial targets get none. The order
// is members'.
func Receiving(members []Member, t time.Time, propagation time.Duration) []Target {
	view := t.Add(-propagation)
	var healthy, unhealthy []Target
	for _, m := range members {
		s, ok := m.Life.StatusAt(view)
		switch {
		case !ok:
		case s.State == StateHealthy:
			healthy = append(healthy, m.Target)
		case s.State == StateUnhealthy:
			unhealthy = append(unhealthy, m.Target)
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	return unhealthy
}
