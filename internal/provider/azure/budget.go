package azure

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"golang.org/x/time/rate"
)

// The read budget: every GET the provider's SDK clients send to ARM takes a
// token from one bucket of Options.ReadQPS a second, Options.ReadBurst at
// once (--azure-read-qps, --azure-read-burst). A GET zerodrop asks for
// itself (a reconcile's Observe, a gate's Backends, a gate-only load
// balancer's or NICs' read, the start-up reads) and a GET the SDK makes on
// its behalf alike: each poll of a long-running operation (a write's, a
// rule-health read's), the final GET of what a PUT wrote, a rule-health
// answer's result, every retry. The SDK's pollers send those through the
// client's pipeline, so a policy there is the one place none of them goes
// around; a limit held by the callers of the SDK saw only the first kind
// (the Service controller's Observe), and a write's polls and final GET
// went out unmetered, as many as the operation took (on the emulator, whose
// Retry-After is 10 ms, a hundred a second for each running operation).
//
// The first try of a request waits for its token before the SDK's retry
// policy runs, under the caller's context (a policy per call): the wait is
// not counted against the per-try timeout, and a caller whose deadline the
// wait would pass fails at once. A retry (a 5xx, a try cut off by the per-try
// timeout) takes its token without waiting (a policy per try, after the
// SDK's backoff): it is charged to the bucket, so the reads after it wait
// for it, without eating into its own try's timeout.

// The defaults of Options.ReadQPS and ReadBurst, --azure-read-qps's and
// --azure-read-burst's.
const (
	DefaultReadQPS   = 10.0
	DefaultReadBurst = 100
)

// ErrReadBudget: a read's token would come after its caller's deadline;
// it was not sent.
var ErrReadBudget = errors.New("ARM read budget spent until past the deadline")

// readBudget is the bucket of the provider's ARM reads.
type readBudget struct{ lim *rate.Limiter }

func newReadBudget(qps float64, burst int) *readBudget {
	return &readBudget{lim: rate.NewLimiter(rate.Limit(qps), burst)}
}

// isRead reports whether ARM meters a request of method as a read.
func isRead(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// readTries counts the tries of one read request: the policy per call sets
// it, the policy per try counts on it (the SDK shares an operation's values
// between its tries).
type readTries struct{ n int }

// perCall waits for the token of a read's first try.
func (b *readBudget) perCall() policy.Policy {
	return policyFunc(func(req *policy.Request) (*http.Response, error) {
		if !isRead(req.Raw().Method) {
			return req.Next()
		}
		ctx := req.Raw().Context()
		if err := b.lim.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for the ARM read budget: %w", ctx.Err())
			}
			return nil, fmt.Errorf("%w (%g a second, %d at once): %w", ErrReadBudget, float64(b.lim.Limit()), b.lim.Burst(), err)
		}
		req.SetOperationValue(&readTries{})
		return req.Next()
	})
}

// perTry charges each try of a read after the first, which perCall did
// not pay for.
func (b *readBudget) perTry() policy.Policy {
	return policyFunc(func(req *policy.Request) (*http.Response, error) {
		if !isRead(req.Raw().Method) {
			return req.Next()
		}
		var t *readTries
		if !req.OperationValue(&t) || t == nil {
			t = &readTries{n: 1} // not through perCall: charge it here
			req.SetOperationValue(t)
		}
		if t.n++; t.n > 1 {
			b.lim.Reserve()
		}
		return req.Next()
	})
}

// policyFunc is a policy.Policy of a function.
type policyFunc func(*policy.Request) (*http.Response, error)

func (f policyFunc) Do(req *policy.Request) (*http.Response, error) { return f(req) }
