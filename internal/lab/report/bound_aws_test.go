package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestAWSBoundAt: docs/aws.md's bound on AWS. Local at the defaults is
// 1 + 2·10 + 5 + 0 + 35 = 61 s: it holds with a grace period of 90 s (B =
// 5 s) and not with Kubernetes' default 30 s nor with 65 s (61 > 65 − 5);
// the lab's gates test (propagation 5 s, grace period 60 s) is 31 s and
// holds. The interval and thresholds are the run's (5 s and 3: 26 s, within
// 31 s less 5 s but not 30 s). The CCM's Cluster check (30 s, 3) is not in
// Cluster's bound, K + M = 3 s, which holds at a grace period of 6 s (B =
// 2 s, a third of it) and not at 3 s (B = 1 s), and with a margin M of
// 10 s not at 15 s. Upstream and recipe have none.
func TestAWSBoundAt(t *testing.T) {
	local := func(i float64, u int, p, g float64) AWSClock {
		return AWSClock{Policy: "Local", HealthCheckIntervalSeconds: i, UnhealthyThreshold: u, HealthyThreshold: 2,
			HealthMaxAgeSeconds: 5, PropagationSeconds: p, GraceSeconds: g}
	}
	cluster := func(m, g float64) AWSClock {
		return AWSClock{Policy: "Cluster", HealthCheckIntervalSeconds: 30, UnhealthyThreshold: 3, HealthyThreshold: 3,
			HealthMaxAgeSeconds: 5, PropagationSeconds: 35, KubeProxyMarginSeconds: m, GraceSeconds: g}
	}
	cases := []struct {
		name   string
		mode   Mode
		clock  AWSClock
		none   bool
		bound  float64
		budget float64
		holds  bool
	}{
		{"Local, defaults, grace 90s", ModeGates, local(10, 2, 35, 90), false, 61, 5, true},
		{"Local, defaults, grace 66s", ModeGates, local(10, 2, 35, 66), false, 61, 5, true},
		{"Local, defaults, grace 65s", ModeGates, local(10, 2, 35, 65), false, 61, 5, false},
		{"Local, defaults, Kubernetes' grace 30s", ModeGates, local(10, 2, 35, 30), false, 61, 5, false},
		{"Local, the lab test's clocks", ModeGates, local(10, 2, 5, 60), false, 31, 5, true},
		{"Local, the target group's interval and threshold count", ModeGates, local(5, 3, 5, 31), false, 26, 5, true},
		{"Local, the same at grace 30s", ModeGates, local(5, 3, 5, 30), false, 26, 5, false},
		{"Local, no propagation, short grace", ModeGates, local(10, 2, 0, 15), false, 26, 5, false},
		{"Cluster, grace 30s", ModeGates, cluster(2, 30), false, 3, 5, true},
		{"Cluster, grace 6s", ModeGates, cluster(2, 6), false, 3, 2, true},
		{"Cluster, grace 3s", ModeGates, cluster(2, 3), false, 3, 1, false},
		{"Cluster, margin 10s, grace 15s", ModeGates, cluster(10, 15), false, 11, 5, false},
		{"upstream", ModeUpstream, local(10, 2, 35, 90), true, 0, 0, false},
		{"recipe", ModeRecipe, local(10, 2, 35, 90), true, 0, 0, false},
	}
	for _, tc := range cases {
		b := AWSBoundAt(tc.mode, tc.clock)
		if (b == nil) != tc.none {
			t.Errorf("%s: bound %+v, want none: %v", tc.name, b, tc.none)
			continue
		}
		if b == nil {
			continue
		}
		if b.BoundSeconds != tc.bound || b.ShutdownBudgetSeconds != tc.budget || b.Holds != tc.holds {
			t.Errorf("%s: bound %gs, budget %gs, holds %v (%s); want %gs, %gs, %v",
				tc.name, b.BoundSeconds, b.ShutdownBudgetSeconds, b.Holds, b.Why, tc.bound, tc.budget, tc.holds)
		}
		if b.AWSClock != tc.clock {
			t.Errorf("%s: clocks %+v, want the ones given, %+v", tc.name, b.AWSClock, tc.clock)
		}
	}
}

// TestAWSBoundNotes: the table's notes say, per gates run on AWS, whether
// the bound held, with the bound and the grace period; nothing for a run
// without one.
func TestAWSBoundNotes(t *testing.T) {
	held := AWSBoundAt(ModeGates, AWSClock{Policy: "Local", HealthCheckIntervalSeconds: 10, UnhealthyThreshold: 2,
		HealthMaxAgeSeconds: 5, PropagationSeconds: 35, GraceSeconds: 90})
	not := AWSBoundAt(ModeGates, AWSClock{Policy: "Local", HealthCheckIntervalSeconds: 10, UnhealthyThreshold: 2,
		HealthMaxAgeSeconds: 5, PropagationSeconds: 35, GraceSeconds: 30})
	var b bytes.Buffer
	writeNotes(&b, []Result{
		{Scenario: "rollout", ExternalTrafficPolicy: "Local", Mode: string(ModeGates), AWS: &AWSFigures{GatesBound: held}},
		{Scenario: "rollout-local", ExternalTrafficPolicy: "Local", Mode: string(ModeGates), AWS: &AWSFigures{GatesBound: not}},
		{Scenario: "rollout", ExternalTrafficPolicy: "Local", Mode: string(ModeUpstream), AWS: &AWSFigures{}},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("notes:\n%s\nwant two lines", b.String())
	}
	for i, want := range []string{
		"rollout Local gates: bound held (bound 61 s, grace period 90 s): K + U·I + A + R + P = 1s + 2·10s + 5s + 0s + 35s = 1m1s ≤ G − B = 1m30s − 5s",
		"rollout-local Local gates: bound did not hold (bound 61 s, grace period 30 s): K + U·I + A + R + P = 1s + 2·10s + 5s + 0s + 35s = 1m1s > G − B = 30s − 5s",
	} {
		if lines[i] != want {
			t.Errorf("note %d:\n%s\nwant\n%s", i, lines[i], want)
		}
	}
}
