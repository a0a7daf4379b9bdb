package report

import (
	"strings"
	"testing"
)

// TestOutsideCompare: the fractions are each client's own failed share and
// the difference is outside minus lab in percentage points; agreement is
// within AgreementPoints, and never without counts.
func TestOutsideCompare(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		o                           OutsideFigures
		labRequests, labFailed      int64
		wantOutside, wantLab, wantD float64
		agrees                      bool
	}{
		{"equal", OutsideFigures{Sent: 1000, Failed: 820}, 2000, 1640, 0.82, 0.82, 0, true},
		{"outside higher by 0.5", OutsideFigures{Sent: 1000, Failed: 825}, 2000, 1640, 0.825, 0.82, 0.5, true},
		{"lab higher by 2", OutsideFigures{Sent: 1000, Failed: 800}, 1000, 820, 0.8, 0.82, -2, false},
		{"nothing sent", OutsideFigures{}, 1000, 0, 0, 0, 0, false},
		{"an error", OutsideFigures{Sent: 10, Error: "exit status 1"}, 10, 0, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Compare(tc.labRequests, tc.labFailed)
			if o.FailedFraction != tc.wantOutside || o.LabFailedFraction != tc.wantLab || o.DifferencePoints != tc.wantD {
				t.Errorf("outside %v, lab %v, difference %v: want %v, %v, %v", o.FailedFraction, o.LabFailedFraction, o.DifferencePoints, tc.wantOutside, tc.wantLab, tc.wantD)
			}
			if o.Agrees() != tc.agrees {
				t.Errorf("agrees %v, want %v", o.Agrees(), tc.agrees)
			}
		})
	}
}

// TestWriteOutsideFigures: a run with an outside client gets a line with
// both fractions and the verdict; a run without gets none.
func TestWriteOutsideFigures(t *testing.T) {
	o := &OutsideFigures{Rate: 200, Sent: 1000, Failed: 800, FailedByKind: map[string]int64{"timeout": 790, "reset": 10}}
	o.Compare(1000, 820)
	var b strings.Builder
	WriteOutsideFigures(&b, []Result{
		{Scenario: "rollout-local", Mode: "upstream", ExternalTrafficPolicy: "local", Requests: 1000, FailedRequests: 820, Outside: o},
		{Scenario: "rollout", Mode: "upstream", Requests: 1000},
	})
	got := b.String()
	for _, want := range []string{"rollout-local local upstream: outside 800 of 1000 failed (80.00%) {reset 10, timeout 790}, lab 820 of 1000 (82.00%", "-2.00 points, DISAGREE"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n  ") != 1 {
		t.Errorf("want one run's line:\n%s", got)
	}
}
