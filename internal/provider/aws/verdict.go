package aws

import (
	"strconv"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// What one DescribeTargetHealth answer says of the targets, as the gates
// read it (pure: the poller, health.go, keeps the answers).
//
// States and reason codes are the API reference's (data type
// TargetHealth): initial (Elb.RegistrationInProgress,
// Elb.InitialHealthChecking), healthy, unhealthy
// (Target.FailedHealthChecks), unhealthy.draining, draining
// (Target.DeregistrationInProgress), unused (Target.NotRegistered,
// Target.NotInUse, Target.InvalidState), unavailable (health checks off).
//
//   - Registered (the readiness gate's condition): listed, not unused and
//     past Elb.RegistrationInProgress. Not healthy: with
//     externalTrafficPolicy Local the node's health check (kube-proxy's
//     health-check node port) answers only once a pod on it is ready,
//     which waits for the gate (docs/design.md, invariant 5).
//   - State: draining is model.Draining (the CCM deregistered the node);
//     every other registered state is model.Active.
//   - Healthy, the termination gate's reading of "the NLB may still send
//     it new connections": false only for a target unhealthy since an
//     answer at least Propagation old (and draining, which State says).
//     initial counts as sending: it may turn healthy right after the
//     answer (an answer serves HealthMaxAge), and the data plane lags that
//     too; a Down read before a pod's deletion began would let the pod go
//     at once (TestGateOnlyNLB saw it). The price: with a ready sibling on
//     the node, the readiness gate takes an initial target for healthy — the NLB's data plane acts on a
//     state change up to Propagation later (30-40 s in
//     aws/containers-roadmap#470, a field report AWS does not document).
//     A target unhealthy for less is still taken as receiving, and so is
//     every unhealthy target while no target of the group is healthy: a
//     target group of unhealthy targets only fails open (ELB docs, "If a
//     target group contains only unhealthy registered targets, the load
//     balancer routes requests to all those targets").

// The target states of DescribeTargetHealth (TargetHealthStateEnum) and
// the reason read here.
const (
	stateInitial           = "initial"
	stateHealthy           = "healthy"
	stateUnhealthy         = "unhealthy"
	stateUnhealthyDraining = "unhealthy.draining"
	stateDraining          = "draining"
	stateUnused            = "unused"

	reasonRegistrationInProgress = "Elb.RegistrationInProgress"
)

// target is one entry of a DescribeTargetHealth answer.
type target struct {
	ID     string // instance ID
	Port   int32
	State  string
	Reason string
}

func (t target) key() string { return t.ID + ":" + strconv.Itoa(int(t.Port)) }

func unhealthy(state string) bool { return state == stateUnhealthy || state == stateUnhealthyDraining }

// unhealthySince carries the time each target has been unhealthy since
// from the previous answer to this one, answered at at: a target unhealthy
// in both keeps its time, one newly unhealthy gets at (the state changed at
// or before the answer: counting from it never counts too much), and a
// target in any other state drops out.
func unhealthySince(prev map[string]time.Time, answer []target, at time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, t := range answer {
		if !unhealthy(t.State) {
			continue
		}
		if s, ok := prev[t.key()]; ok {
			out[t.key()] = s
		} else {
			out[t.key()] = at
		}
	}
	return out
}

// statuses is what the gates read of one answer at now: one BackendStatus
// per registered target, its Address the instance ID
// (provider.ForeignRule.ByInstance), with since from unhealthySince and
// asked the time the read began.
func statuses(listener string, answer []target, since map[string]time.Time, asked, now time.Time, propagation time.Duration) []provider.BackendStatus {
	failOpen := true
	for _, t := range answer {
		if t.State == stateHealthy {
			failOpen = false
		}
	}
	var out []provider.BackendStatus
	for _, t := range answer {
		if t.State == stateUnused || t.State == stateInitial && t.Reason == reasonRegistrationInProgress {
			continue // not (yet) registered
		}
		s := provider.BackendStatus{Listener: listener, Address: t.ID, Port: t.Port, State: model.Active,
			HealthKnown: true, Healthy: true, Probed: true, ProbedAt: asked, Connections: -1}
		switch {
		case t.State == stateDraining:
			s.State, s.Healthy = model.Draining, false
		case unhealthy(t.State):
			u, ok := since[t.key()]
			s.Healthy = failOpen || !ok || now.Sub(u) < propagation
		}
		out = append(out, s)
	}
	return out
}
