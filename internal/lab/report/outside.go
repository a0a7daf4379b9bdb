package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// AgreementPoints is how far apart, in percentage points, the outside
// client's failed fraction and the lab's may be for the two to agree
// (issue 52's acceptance).
const AgreementPoints = 1.0

// OutsideFigures are what a client outside the lab's traffic generator
// (internal/lab/outside, --outside-client-rate) counted in the same run,
// from the same namespace, to the same frontend, beside the lab's own.
type OutsideFigures struct {
	// Rate is its requests per second (GET only, each on a new
	// connection); Sent, Failed and FailedByKind what it counted.
	Rate         int              `json:"rate"`
	Sent         int64            `json:"sent"`
	Failed       int64            `json:"failed"`
	FailedByKind map[string]int64 `json:"failed_by_kind,omitempty"`
	// FailedFraction is Failed/Sent and LabFailedFraction the lab's
	// FailedRequests/Requests (late requests included), both 0 to 1;
	// DifferencePoints the first minus the second, in percentage points.
	FailedFraction    float64 `json:"failed_fraction"`
	LabFailedFraction float64 `json:"lab_failed_fraction"`
	DifferencePoints  float64 `json:"difference_points"`
	// Seconds is its per-second series: requests whose slot fell in each
	// second of its schedule, and how many of them failed.
	Seconds [][2]int64 `json:"seconds_sent_failed,omitempty"`
	// Error is why there are no counts (the client did not start or did
	// not write them).
	Error string `json:"error,omitempty"`
}

// Compare fills the fractions and their difference from Sent and Failed
// and the lab's requests and failed requests.
func (o *OutsideFigures) Compare(labRequests, labFailed int64) {
	o.FailedFraction = fraction(o.Failed, o.Sent)
	o.LabFailedFraction = fraction(labFailed, labRequests)
	o.DifferencePoints = math.Round((o.FailedFraction-o.LabFailedFraction)*100*100) / 100
}

// Agrees reports whether both counted and their failed fractions are
// within AgreementPoints of each other.
func (o *OutsideFigures) Agrees() bool {
	return o.Error == "" && o.Sent > 0 && math.Abs(o.DifferencePoints) <= AgreementPoints
}

func fraction(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// WriteOutsideFigures prints, per run with an outside client, its failed
// fraction beside the lab's and their difference.
func WriteOutsideFigures(w io.Writer, results []Result) {
	var lines []string
	for _, r := range results {
		o := r.Outside
		if o == nil {
			continue
		}
		name := r.row() + " " + r.column()
		if o.Error != "" {
			lines = append(lines, fmt.Sprintf("  %s: no counts: %s", name, o.Error))
			continue
		}
		verdict := "agree"
		if !o.Agrees() {
			verdict = "DISAGREE"
		}
		lines = append(lines, fmt.Sprintf("  %s: outside %d of %d failed (%.2f%%) %s, lab %d of %d (%.2f%%, %d late): %+.2f points, %s (within %.0f)",
			name, o.Failed, o.Sent, 100*o.FailedFraction, byKind(o.FailedByKind), r.FailedRequests, r.Requests, 100*o.LabFailedFraction,
			r.RequestsLate, o.DifferencePoints, verdict, AgreementPoints))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nThe outside client (its own process in the client namespace, open loop, GET on a new connection each):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// byKind is "{reset 3, timeout 5}", by name.
func byKind(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
