package scenarios

import (
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// TestAWSBoundVerdict: a gates run on emulated AWS whose bound holds is
// called out when it lost anything beyond the health check's resets and
// the lab client's stalled sends, and not otherwise; a bound that does
// not hold is named whatever the run lost; a run without a bound (another
// mode, another world) gets no word.
func TestAWSBoundVerdict(t *testing.T) {
	held := &report.AWSBound{Holds: true, Why: "61s ≤ G − B"}
	broken := &report.AWSBound{Holds: false, Why: "lags 2m0s, more than the P"}
	for _, tc := range []struct {
		name               string
		bound              *report.AWSBound
		failed, stall, ws  int64
		resetReqs, resetWS int64
		want               string
	}{
		{"held, nothing lost", held, 0, 0, 0, 0, 0, ""},
		{"held, only resets and stalls", held, 5, 2, 3, 3, 3, ""},
		{"held, a request beyond the resets", held, 5, 1, 3, 3, 3, "LOST WHERE ITS BOUND HOLDS: 1 requests and 0 WebSockets"},
		{"held, a WebSocket beyond the resets", held, 0, 0, 4, 0, 3, "LOST WHERE ITS BOUND HOLDS: 0 requests and 1 WebSockets"},
		{"not held, lost", broken, 900, 0, 0, 0, 0, "the bound promises nothing here (lags 2m0s"},
		{"not held, nothing lost", broken, 0, 0, 0, 0, 0, "the bound promises nothing here"},
		{"no bound (recipe)", nil, 900, 0, 0, 0, 0, ""},
	} {
		res := report.Result{FailedRequests: tc.failed, RequestsLateStall: tc.stall, LongConnsBroken: tc.ws,
			AWS: &report.AWSFigures{GatesBound: tc.bound, HealthCheckResets: &report.AWSResets{Requests: tc.resetReqs, LongConns: tc.resetWS}}}
		got := awsBoundVerdict(res)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := awsBoundVerdict(report.Result{FailedRequests: 10}); got != "" {
		t.Errorf("a run without AWS figures: %q, want none", got)
	}
}
