package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLabDataPlane runs zerodrop mode with an HAProxy data plane of two
// replicas (--data-plane-replicas 2): a rolling update loses nothing and
// both replicas carry the client's traffic; in lb-replica-restart, a
// replica's zerodrop process restarted (SIGKILL, SIGTERM) with nothing
// changed writes nothing to its HAProxy. (The replacement of the other
// replica is measured, not asserted: the connections established through
// it end, by design.)
func TestLabDataPlane(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "lab.json")
	workDir := filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	before := rootState(t)
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"--scenario", "rollout," + scenarioLBReplicaRestart, "--mode", "zerodrop",
		"--data-plane-replicas", "2", "--json", jsonPath, "--dir", workDir}, &stdout, &stderr)
	t.Logf("%s\n%s", stderr.String(), stdout.String())
	defer func() {
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
		}
	}()
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	if d := cmp.Diff(before, rootState(t)); d != "" {
		t.Errorf("the lab left something behind in the root namespace or the process table (-before +after):\n%s", d)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("want 2 runs, got %s", raw)
	}
	roll, restart := rep.Scenarios[0], rep.Scenarios[1]
	for _, r := range rep.Scenarios {
		if r.DataPlaneReplicas != 2 {
			t.Errorf("%s: data_plane_replicas %d, want 2", r.Scenario, r.DataPlaneReplicas)
		}
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
	if !slices.Equal(restart.WritesPerRestart, []int64{0, 0}) {
		t.Errorf("%s: writes per restart of replica 0's zerodrop process %v, want [0 0]: nothing changed", restart.Scenario, restart.WritesPerRestart)
	}
}
