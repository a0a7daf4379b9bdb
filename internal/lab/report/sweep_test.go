package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestSweepChart: a sweep of two points in two modes draws one line per
// mode in each chart, names every point, and tabulates each run (an error
// as such, a run missing at a point as not run); results without a clock,
// or a clock of one point, draw no sweep.
func TestSweepChart(t *testing.T) {
	clock := func(arm float64) *AzureClock { return &AzureClock{ARMLatencySeconds: arm, GraceSeconds: 30} }
	run := func(mode string, arm float64, failed int64) Result {
		return Result{Scenario: "rollout-local", ExternalTrafficPolicy: "local", Mode: mode, Backend: "ip",
			Requests: 1000, FailedRequests: failed, RolloutSeconds: 12.5, AzureClock: clock(arm)}
	}
	results := []Result{run("upstream", 1, 100), run("zerodrop", 1, 0), run("upstream", 10, 300), run("zerodrop", 10, 0),
		run("zerodrop", 30, 0), run("upstream", 30, 500)}
	results[4].Err = errors.New("steady state not reached")
	var b bytes.Buffer
	writeSweep(&b, results)
	out := b.String()
	for _, want := range []string{"sweep: rollout-local local", "arm 1s lb+0s lag 0s", "arm 10s lb+0s lag 0s", "arm 30s lb+0s lag 0s",
		"100 / 1000", "300 / 1000", "500 / 1000", "error: steady state not reached", "zerodrop/ip", "upstream"} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep HTML lacks %q:\n%s", want, out)
		}
	}
	// Two charts, each with a line per mode.
	if n := strings.Count(out, "<polyline"); n != 4 {
		t.Errorf("%d lines, want 4 (2 charts × 2 modes)", n)
	}
	b.Reset()
	writeSweep(&b, []Result{run("zerodrop", 1, 0), {Scenario: "rollout", Mode: "zerodrop"}})
	if b.Len() != 0 {
		t.Errorf("one point drew a sweep: %s", b.String())
	}
}
