package azure

import (
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// retryAfterHeaders are the headers the SDK's pollers read a poll's wait
// from (azcore's internal shared.RetryAfter: milliseconds first, then
// Retry-After in seconds or as an HTTP date).
var retryAfterHeaders = []string{"retry-after-ms", "x-ms-retry-after-ms", "Retry-After"}

// pollFloor keeps the SDK's pollers from polling a long-running operation
// more often than every floor (Options.PollFrequency): a Retry-After shorter
// than it is taken off the answer, and the poller waits its Frequency, which
// is floor. ARM's network provider asks for 10 s, so in production nothing
// changes; a server asking for less (the emulator's 10 ms) would otherwise
// spend the read budget (budget.go) on polls, a hundred a second for each
// running operation, and the gates' and reconciles' reads would queue
// behind them. Polling less often than a server allows is always allowed.
// A 429's or 5xx's Retry-After is the retry policy's, below this one
// (a policy per call sees the answer after the retries): kept.
func pollFloor(floor time.Duration) policy.Policy {
	return policyFunc(func(req *policy.Request) (*http.Response, error) {
		resp, err := req.Next()
		if err != nil || resp == nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return resp, err
		}
		if d, ok := retryAfter(resp.Header); ok && d < floor {
			for _, h := range retryAfterHeaders {
				resp.Header.Del(h)
			}
		}
		return resp, err
	})
}

// retryAfter is the wait an answer asks for, read as azcore reads it.
func retryAfter(h http.Header) (time.Duration, bool) {
	for _, name := range retryAfterHeaders[:2] {
		if v := h.Get(name); v != "" {
			if ms, err := strconv.Atoi(v); err == nil {
				return time.Duration(ms) * time.Millisecond, true
			}
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return time.Until(at), true
	}
	return 0, false
}
