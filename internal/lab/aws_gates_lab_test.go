package lab

import (
	"testing"
)

// TestLabAWSGates is gates mode's lab test on emulated AWS: the real
// aws-cloud-controller-manager writes the NLB of instance targets, and
// `zerodrop controller --provider aws` gates the pods of the gate-only
// Service, externalTrafficPolicy Local, through a rolling update of three
// replicas on three nodes (a pod replaced on another node is its node's
// last: the termination gate's Local case), the emulator's
// registration delay and propagation scaled down (the health checks keep
// the CCM's 10 s interval: the bound below is the shipped check's). The grace
// period covers docs/aws.md's bound at these clocks (K + U·I + A + R + P
// ≈ 1 + 20 + 5 + 0 + 5 = 31 s, within 60 s less the shutdown budget,
// 5 s by default: drain.ShutdownBudgetOf). Every failed request and broken WebSocket must be a health
// check's reset (AWS's connection termination on an unhealthy target,
// which no gate prevents: counted apart), apart from requests the lab's own
// client sent late because its process stalled; no preStop drain hook may
// fail or end at its deadline; zerodrop must make no call to AWS but
// Describes, and some of those. Not rollout-local: with one replica the
// node it leaves may turn unhealthy before the node it moves to turns
// healthy, and the NLB then fails open to every node, the one without a
// pod too (docs/aws.md, "What gate-only cannot fix"); with three, a node
// with a pod stays healthy.
//
//	go test -count=1 -run TestLabAWSGates ./internal/lab/
func TestLabAWSGates(t *testing.T) {
	r, raw := runAWSLab(t, "--mode", "gates", "--traffic-policy", "local", "--grace-period", "60s")
	a := r.AWS
	if a == nil || a.Zerodrop == nil || a.HealthCheckResets == nil {
		t.Fatalf("no AWS figures, zerodrop's calls or health-check resets in %s", raw)
	}
	// The run is a cell where the gates must lose nothing: its grace
	// period covers the bound at the clocks the world read.
	if b := a.GatesBound; b == nil || !b.Holds {
		t.Errorf("the gates' bound at the run's clocks %+v: want one computed, and held", b)
	}
	if r.Requests < 100 || r.LongConns == 0 {
		t.Errorf("too little traffic through the NLB: %d requests, %d WebSockets", r.Requests, r.LongConns)
	}
	h := a.HealthCheckResets
	if n := r.FailedRequests - h.Requests - r.RequestsLateStall; n > 0 {
		t.Errorf("%d of %d requests failed other than by a health check's reset (%d) or the lab client's stall (%d)",
			n, r.FailedRequests, h.Requests, r.RequestsLateStall)
	}
	if n := r.LongConnsBroken - h.LongConns; n > 0 {
		t.Errorf("%d of %d WebSockets broke other than by a health check's reset (%d)", n, r.LongConnsBroken, h.LongConns)
	}
	if r.HookFailures > 0 || r.DrainDeadline > 0 {
		t.Errorf("%d preStop drain hooks failed, %d drain calls ended at their deadline: a pod stopped undrained", r.HookFailures, r.DrainDeadline)
	}
	if r.DrainDrained == 0 {
		t.Error("no drain call answered drained: the termination gate did not run")
	}
	z := a.Zerodrop
	reads := 0
	for _, n := range z.Reads {
		reads += n
	}
	if len(z.Writes) > 0 || reads == 0 || z.Reads["DescribeTargetHealth"] == 0 {
		t.Errorf("zerodrop's calls: writes %v, reads %v: want no write and DescribeTargetHealth among its reads", z.Writes, z.Reads)
	}
	t.Logf("rollout, gates on emulated AWS: %d of %d requests failed (%d health-check resets, %d client stalls), %d of %d WebSockets broken (%d health-check resets), %d targets turned unhealthy; zerodrop's reads %v; the CCM's writes %v; %.1f s to steady",
		r.FailedRequests, r.Requests, h.Requests, r.RequestsLateStall, r.LongConnsBroken, r.LongConns, h.LongConns, h.Unhealthy, z.Reads, a.Writes, r.RolloutSeconds)
}
