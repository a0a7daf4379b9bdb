package scenarios

import (
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/provider"
)

func TestDuplicates(t *testing.T) {
	b := func(listener, addr string, port int32) provider.BackendStatus {
		return provider.BackendStatus{Listener: listener, Address: addr, Port: port}
	}
	for _, tc := range []struct {
		name string
		bs   []provider.BackendStatus
		want int
	}{
		{"none", nil, 0},
		{"distinct", []provider.BackendStatus{b("l", "10.0.0.1", 80), b("l", "10.0.0.2", 80), b("l", "10.0.0.1", 81)}, 0},
		{"doubled", []provider.BackendStatus{b("l", "10.0.0.1", 80), b("l", "10.0.0.1", 80)}, 1},
		{"tripled counts once", []provider.BackendStatus{b("l", "10.0.0.1", 80), b("l", "10.0.0.1", 80), b("l", "10.0.0.1", 80)}, 1},
		{"other listener ignored", []provider.BackendStatus{b("l", "10.0.0.1", 80), b("m", "10.0.0.1", 80)}, 0},
	} {
		if got := duplicates(tc.bs, "l"); got != tc.want {
			t.Errorf("%s: duplicates = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestLossless: what makes a chaos run of zerodrop fail.
func TestLossless(t *testing.T) {
	clean := report.Result{Scenario: report.ScenarioAPIServerDown, Chaos: &report.ChaosFigures{OutageSeconds: 30}}
	if err := lossless(clean); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*report.Result)
		want string
	}{
		{"failed", func(r *report.Result) { r.FailedRequests = 1 }, "1 requests failed"},
		{"failed beyond the client's stalls", func(r *report.Result) { r.FailedRequests, r.RequestsLateStall = 5, 2 }, "3 requests failed"},
		{"broken", func(r *report.Result) { r.LongConnsBroken = 2 }, "2 long connections broke"},
		{"doubled", func(r *report.Result) { r.DuplicateBackendSamples = 3 }, "doubled in 3 samples"},
		{"hook failed", func(r *report.Result) { r.HookFailures = 2 }, "2 preStop drain hooks failed"},
		{"outage write", func(r *report.Result) { r.Chaos.WritesDuringOutage = 1 }, "1 writes during the outage"},
		{"recovery write", func(r *report.Result) { r.Chaos.WritesAfterRecovery = 4 }, "4 after it"},
		{"pool changed", func(r *report.Result) { r.Chaos.PoolChanges = 5 }, "changed in 5 samples"},
	} {
		r := clean
		c := *clean.Chaos
		r.Chaos = &c
		tc.mod(&r)
		err := lossless(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: lossless = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Late only by a stall of the lab's own client: not zerodrop's.
	stall := clean
	stall.FailedRequests, stall.RequestsLate, stall.RequestsLateStall = 2, 2, 2
	if err := lossless(stall); err != nil {
		t.Errorf("failures all by a client stall: %v", err)
	}
	// kill-mid-plan writes by design: its writes are no failure.
	kill := report.Result{Scenario: report.ScenarioKillMidPlan, Chaos: &report.ChaosFigures{Kills: 20, WritesAfterRecovery: 7}}
	if err := lossless(kill); err != nil {
		t.Errorf("kill-mid-plan with writes: %v", err)
	}
}
