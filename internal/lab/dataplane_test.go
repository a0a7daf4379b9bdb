package lab

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
)

// TestLabDataPlane runs zerodrop mode with an HAProxy data plane of two
// replicas in the lab's own arrangement (--data-plane-replicas 2, which make
// chaos' kill-mid-plan uses): a rolling update loses nothing, every replaced pod is
// drained and both replicas carry the client's traffic. (That a replica's
// restarted zerodrop process writes nothing, lb-replica-restart, is
// TestLabFromChart's: the same data-plane role, restarted as the chart
// installs it.)
func TestLabDataPlane(t *testing.T) {
	before := rootState(t)
	entries := runLab(t, 6*time.Minute, "--scenario", "rollout", "--mode", "zerodrop", "--data-plane-replicas", "2")
	if d := cmp.Diff(before, rootState(t)); d != "" {
		t.Errorf("the lab left something behind in the root namespace or the process table (-before +after):\n%s", d)
	}
	// runLab returns the report's entries as maps; read them as Results.
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(raw, &rep.Scenarios); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 {
		t.Fatalf("want 1 run, got %s", raw)
	}
	roll := rep.Scenarios[0]
	if roll.DataPlaneReplicas != 2 {
		t.Errorf("%s: data_plane_replicas %d, want 2", roll.Scenario, roll.DataPlaneReplicas)
	}
	if roll.FailedRequests-roll.RequestsLateStall != 0 || roll.LongConnsBroken != 0 {
		t.Errorf("rollout with two data-plane replicas lost traffic: %d failed (%d by a client stall), %d broken long connections",
			roll.FailedRequests, roll.RequestsLateStall, roll.LongConnsBroken)
	}
	if roll.DrainDeadline != 0 || roll.DrainDrained < 3 {
		t.Errorf("rollout: drain calls drained %d, at their deadline %d; want every replaced pod drained", roll.DrainDrained, roll.DrainDeadline)
	}
	if len(roll.DataPlaneSessions) != 2 || slices.Min(roll.DataPlaneSessions) <= 0 {
		t.Errorf("rollout: connections per replica %v; want both replicas to carry traffic", roll.DataPlaneSessions)
	}
}

// TestLabFromChart runs zerodrop mode installed from the chart
// (--from-chart) over two data-plane replicas: the chart's DaemonSet on the
// load-balancer hosts' Nodes, its controller Deployment, its webhook
// (called by the API server through its Service) and its drain Service,
// every process authenticated as its pod's ServiceAccount. A rolling update
// loses nothing, every replaced pod is drained through the hook the
// chart's webhook injected, both replicas carry traffic, and the rollout's
// writes are counted at the sockets of the chart's HAProxy containers; in
// lb-replica-restart, a data-plane pod's controller container killed and
// terminated (and started again in place by the kubelet stand-in) writes
// nothing and loses nothing. (The DaemonSet update's and the node failure's
// costs are measured, not asserted.)
func TestLabFromChart(t *testing.T) {
	before := rootState(t)
	entries := runLab(t, 8*time.Minute, "--scenario", "rollout,"+scenarios.ScenarioLBReplicaRestart, "--mode", "zerodrop",
		"--data-plane-replicas", "2", "--from-chart")
	if d := cmp.Diff(before, rootState(t)); d != "" {
		t.Errorf("the lab left something behind in the root namespace or the process table (-before +after):\n%s", d)
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	var runs []report.Result
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("want 2 runs, got %s", raw)
	}
	roll, restart := runs[0], runs[1]
	if roll.FailedRequests-roll.RequestsLateStall != 0 || roll.LongConnsBroken != 0 {
		t.Errorf("rollout installed from the chart lost traffic: %d failed (%d by a client stall), %d broken long connections",
			roll.FailedRequests, roll.RequestsLateStall, roll.LongConnsBroken)
	}
	if roll.DrainDeadline != 0 || roll.DrainDrained < 3 || roll.HookFailures != 0 {
		t.Errorf("drain calls drained %d, at their deadline %d, hook failures %d; want every replaced pod drained through the chart's hook",
			roll.DrainDrained, roll.DrainDeadline, roll.HookFailures)
	}
	if len(roll.DataPlaneSessions) != 2 || slices.Min(roll.DataPlaneSessions) <= 0 {
		t.Errorf("connections per replica %v; want both of the chart's replicas to carry traffic", roll.DataPlaneSessions)
	}
	if roll.ProviderWrites <= 0 {
		t.Errorf("%d writes counted at the chart's HAProxy sockets during a rollout", roll.ProviderWrites)
	}
	if !slices.Equal(restart.WritesPerRestart, []int64{0, 0}) {
		t.Errorf("%s: writes per restart of replica 0's controller container %v, want [0 0]: nothing changed", restart.Scenario, restart.WritesPerRestart)
	}
	if f := restart.ReplicaDisruption; f != nil {
		// The DaemonSet update (the chart's default strategy) and the hard
		// failure are measured, not asserted: logged for the record.
		t.Logf("%s: by phase %+v; requests late by the client's stall (not counted in them): %d", restart.Scenario, *f, restart.RequestsLateStall)
	}
	if f := restart.ReplicaDisruption; f == nil || f.RestartFailed != 0 || f.RestartBroken != 0 {
		t.Errorf("%s: the controller container's restarts lost traffic: %+v", restart.Scenario, f)
	}
}
