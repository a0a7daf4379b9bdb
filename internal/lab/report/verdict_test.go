package report

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestWriteVerdict: every run has its line under its scenario, with its
// losses and time whatever they are; a run that failed says so; what was
// not run is named with why; the HTML report's path ends it.
func TestWriteVerdict(t *testing.T) {
	results := []Result{
		{Scenario: "rollout", Mode: "upstream", Backend: "node", ExternalTrafficPolicy: "local", Requests: 3063, FailedRequests: 48, LongConns: 9, LongConnsBroken: 5, RolloutSeconds: 7.1},
		{Scenario: "rollout", Mode: "zerodrop", Backend: "ip", ExternalTrafficPolicy: "local", Requests: 3100, FailedRequests: 8, RequestsLate: 8, RequestsLateStall: 8, ProviderWrites: 12, LongConns: 4, RolloutSeconds: 14.6},
		{Scenario: "restart-idle", Mode: "zerodrop", Backend: "ip", ExternalTrafficPolicy: "local", Err: errors.New("restart 2: no leader\nmore")},
	}
	var b bytes.Buffer
	WriteVerdict(&b, results, []string{"restart-idle in recipe mode: why"}, "out/lab.html")
	// Cells are apart by two spaces or more, as the column widths say.
	out := regexp.MustCompile(`  +`).ReplaceAllString(b.String(), "  ")
	for _, want := range []string{
		"rollout, externalTrafficPolicy Local\n",
		"  upstream  48 of 3,063 requests failed  5 of 9 WebSockets broken  0 writes  7.1 s\n",
		"  zerodrop/ip  8 of 3,100 requests failed (8 of them the lab client's stall)  0 of 4 WebSockets broken  12 writes  14.6 s\n",
		"restart-idle, externalTrafficPolicy Local\n",
		"  zerodrop/ip  did not complete: restart 2: no leader\n",
		"Not run:\n  restart-idle in recipe mode: why\n",
		"HTML report (timelines of every run): out/lab.html\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verdict lacks %q:\n%s", want, out)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 14519: "14,519", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
