package azure

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"zerodrop.dev/zerodrop/internal/provider"
)

// ErrNotOwned means the load balancer carries another owner's TagOwner:
// zerodrop neither reads its listeners as its own nor writes to it.
var ErrNotOwned = errors.New("load balancer is owned by someone else")

// ErrNotConfigured means a key names a load balancer that is not in
// Options.LoadBalancers.
var ErrNotConfigured = errors.New("load balancer is not configured")

// UnrepresentableError is a desired state Azure cannot express (backends of
// one listener on different ports, more long-named Services than tags).
type UnrepresentableError struct {
	Listener string
	Reason   string
}

func (e *UnrepresentableError) Error() string {
	if e.Listener == "" {
		return "azure cannot represent this load balancer: " + e.Reason
	}
	return fmt.Sprintf("azure cannot represent listener %s: %s", e.Listener, e.Reason)
}

// classify turns an ARM error into what the controller acts on: 412 is
// provider.ErrConflict (re-read, re-plan, retry), 429 a
// provider.RetryAfterError, everything else a wrapped error.
func (p *Provider) classify(op string, err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%s: %w: %w", op, provider.ErrConflict, err)
		case http.StatusTooManyRequests:
			return &provider.RetryAfterError{After: p.retryAfter(re.RawResponse), Err: fmt.Errorf("%s: throttled: %w", op, err)}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// MaxRetryAfter bounds the wait a throttled answer asks for. ARM's own
// throttling windows are seconds to minutes; a larger value (a bug, or
// something answering in ARM's place) would park the load balancer's work
// item for as long as it says, so it is cut to this and retried then (a
// throttled retry costs one request).
const MaxRetryAfter = 5 * time.Minute

// retryAfter reads ARM's throttling headers: retry-after-ms,
// x-ms-retry-after-ms, then Retry-After in seconds or as an HTTP date; at
// most MaxRetryAfter.
func (p *Provider) retryAfter(resp *http.Response) time.Duration {
	if resp != nil {
		for _, h := range []string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
			if ms, err := strconv.ParseInt(resp.Header.Get(h), 10, 64); err == nil && ms > 0 {
				return min(time.Duration(min(ms, int64(MaxRetryAfter/time.Millisecond)))*time.Millisecond, MaxRetryAfter)
			}
		}
		v := resp.Header.Get("Retry-After")
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
			// Compared in seconds first: a large count would overflow
			// a Duration.
			return min(time.Duration(min(s, int64(MaxRetryAfter/time.Second)))*time.Second, MaxRetryAfter)
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := time.Until(t); d > 0 {
				return min(d, MaxRetryAfter)
			}
		}
	}
	return p.opts.DefaultRetryAfter
}
