package controller

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeReviews is an API server for the metrics filter's reviews: token
// "reader-token" is the user reader, "stranger-token" the user stranger,
// any other token is not authenticated; reader may get /metrics, nobody
// anything else. It counts the reviews, and fails the next ones while
// failTokens / failAccess are above zero.
type fakeReviews struct {
	tokens, access         atomic.Int64
	failTokens, failAccess atomic.Int64
}

func (f *fakeReviews) clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokens.Add(1)
		if f.failTokens.Add(-1) >= 0 {
			return true, nil, errors.New("injected: the API server is unreachable")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case "reader-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "reader", UID: "u-1", Groups: []string{"system:authenticated"}}}
		case "stranger-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "stranger", UID: "u-2", Groups: []string{"system:authenticated"}}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.access.Add(1)
		if f.failAccess.Add(-1) >= 0 {
			return true, nil, errors.New("injected: the API server is unreachable")
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "reader" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC policy matched"
		}
		return true, sar, nil
	})
	return cs
}

// fakeClock is the reviews' clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	testAllowTTL = 2 * time.Minute
	testDenyTTL  = 10 * time.Second
)

// newTestReviewer is a reviewer over f with the TTLs above, a fake clock and
// at most max entries per cache (0: the default).
func newTestReviewer(f *fakeReviews, max int) (*reviewer, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return newReviewer(f.clientset(), reviewCache{AllowTTL: testAllowTTL, DenyTTL: testDenyTTL, MaxEntries: max, Now: clock.Now}), clock
}

// scrape is one request to the metrics filter, as Prometheus makes it.
func scrape(t *testing.T, rv *reviewer, token, path string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "https://zerodrop:8443"+path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	code, _ := rv.authorize(r)
	return code
}

// wantReviews checks how many TokenReviews and SubjectAccessReviews the API
// server has answered (or failed) so far.
func wantReviews(t *testing.T, f *fakeReviews, when string, tokens, access int64) {
	t.Helper()
	if got, gotA := f.tokens.Load(), f.access.Load(); got != tokens || gotA != access {
		t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews, want %d and %d", when, got, gotA, tokens, access)
	}
}

// TestMetricsAuthCache: the metrics filter caches reviews as Kubernetes'
// delegating authenticator and authorizer do: a token's review by a hash of
// the token, a decision by user, path and verb; allowed for the allow TTL,
// refused for the shorter deny TTL; an API error never.
func TestMetricsAuthCache(t *testing.T) {
	t.Run("allowed scrapes share one review of each kind per TTL", func(t *testing.T) {
		f := &fakeReviews{}
		rv, clock := newTestReviewer(f, 0)
		for i := 0; i < 2; i++ {
			if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
				t.Fatalf("scrape %d: %d, want 200", i+1, code)
			}
		}
		wantReviews(t, f, "two scrapes", 1, 1)
		clock.Step(testAllowTTL - time.Second)
		scrape(t, rv, "reader-token", "/metrics")
		wantReviews(t, f, "a scrape within the allow TTL", 1, 1)
		clock.Step(2 * time.Second)
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
			t.Fatalf("scrape after the TTL: %d, want 200", code)
		}
		wantReviews(t, f, "a scrape after the allow TTL", 2, 2)
	})

	t.Run("a refused token is cached as refused, briefly", func(t *testing.T) {
		f := &fakeReviews{}
		rv, clock := newTestReviewer(f, 0)
		for i := 0; i < 2; i++ {
			if code := scrape(t, rv, "forged-token", "/metrics"); code != http.StatusUnauthorized {
				t.Fatalf("scrape %d with a refused token: %d, want 401", i+1, code)
			}
		}
		wantReviews(t, f, "two refused scrapes", 1, 0)
		// The reader's token still passes; the refused one still does not.
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
			t.Fatalf("the reader after a refused token: %d, want 200", code)
		}
		if code := scrape(t, rv, "forged-token", "/metrics"); code != http.StatusUnauthorized {
			t.Fatalf("the refused token after the reader's: %d, want 401", code)
		}
		wantReviews(t, f, "and the reader's", 2, 1)
		clock.Step(testDenyTTL + time.Second)
		if code := scrape(t, rv, "forged-token", "/metrics"); code != http.StatusUnauthorized {
			t.Fatalf("the refused token after the deny TTL: %d, want 401", code)
		}
		scrape(t, rv, "reader-token", "/metrics")
		wantReviews(t, f, "after the deny TTL, within the allow TTL", 3, 1)
	})

	t.Run("a forbidden user is cached as forbidden, briefly", func(t *testing.T) {
		f := &fakeReviews{}
		rv, clock := newTestReviewer(f, 0)
		for i := 0; i < 2; i++ {
			if code := scrape(t, rv, "stranger-token", "/metrics"); code != http.StatusForbidden {
				t.Fatalf("scrape %d by a stranger: %d, want 403", i+1, code)
			}
		}
		wantReviews(t, f, "two forbidden scrapes", 1, 1)
		clock.Step(testDenyTTL + time.Second)
		if code := scrape(t, rv, "stranger-token", "/metrics"); code != http.StatusForbidden {
			t.Fatalf("a stranger after the deny TTL: %d, want 403", code)
		}
		wantReviews(t, f, "after the deny TTL", 1, 2)
	})

	t.Run("decisions are per path", func(t *testing.T) {
		f := &fakeReviews{}
		rv, _ := newTestReviewer(f, 0)
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
			t.Fatalf("/metrics: %d, want 200", code)
		}
		if code := scrape(t, rv, "reader-token", "/debug/pprof/"); code != http.StatusForbidden {
			t.Fatalf("/debug/pprof/ after /metrics was allowed: %d, want 403", code)
		}
		wantReviews(t, f, "two paths", 1, 2)
	})

	t.Run("API errors are not cached", func(t *testing.T) {
		f := &fakeReviews{}
		rv, _ := newTestReviewer(f, 0)
		f.failTokens.Store(1)
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusServiceUnavailable {
			t.Fatalf("a failed TokenReview: %d, want 503", code)
		}
		f.failAccess.Store(1)
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusServiceUnavailable {
			t.Fatalf("a failed SubjectAccessReview: %d, want 503", code)
		}
		if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
			t.Fatalf("after the API server came back: %d, want 200", code)
		}
		wantReviews(t, f, "a failed token review, a failed access review, a success", 2, 2)
	})

	t.Run("the cache is bounded", func(t *testing.T) {
		f := &fakeReviews{}
		rv, _ := newTestReviewer(f, 2)
		for _, tok := range []string{"reader-token", "stranger-token", "forged-token", "reader-token"} {
			scrape(t, rv, tok, "/metrics")
		}
		// Two entries: the third token pushed the first one's review out (the
		// two decisions still fit).
		wantReviews(t, f, "three tokens, then the first again, 2 entries", 4, 2)

		f = &fakeReviews{}
		rv, _ = newTestReviewer(f, 0)
		for _, tok := range []string{"reader-token", "stranger-token", "forged-token", "reader-token"} {
			scrape(t, rv, tok, "/metrics")
		}
		wantReviews(t, f, "three tokens, then the first again, default size", 3, 2)
	})
}

// TestMetricsAuthLimitsUnknownTokens: a flood of random bearer tokens (each
// one not in the cache) costs the API server at most 5 TokenReviews per
// second — the others are refused with 429 without a review — while the
// real scraper keeps being served throughout, also when its cached review
// expires in the middle of the flood (a token the API server authenticated
// before is reviewed again outside the budget). Simulated time: 4 minutes
// in 100 ms steps, 20 random tokens per step (200/s), the scraper once a
// second.
func TestMetricsAuthLimitsUnknownTokens(t *testing.T) {
	f := &fakeReviews{}
	rv, clock := newTestReviewer(f, 0)
	if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
		t.Fatalf("the scraper before the flood: %d, want 200", code)
	}
	const steps, perStep, stepsPerSecond = 2400, 20, 10
	perSecond := make([]int64, steps/stepsPerSecond)
	var refused, throttled, scraperFailed int
	for s := 0; s < steps; s++ {
		clock.Step(time.Second / stepsPerSecond)
		for i := 0; i < perStep; i++ {
			before := f.tokens.Load()
			switch code := scrape(t, rv, fmt.Sprintf("forged-%d-%d", s, i), "/metrics"); code {
			case http.StatusUnauthorized:
				refused++
			case http.StatusTooManyRequests:
				throttled++
			default:
				t.Fatalf("a random token: %d, want 401 or 429", code)
			}
			perSecond[s/stepsPerSecond] += f.tokens.Load() - before
		}
		if s%stepsPerSecond == 0 {
			if code := scrape(t, rv, "reader-token", "/metrics"); code != http.StatusOK {
				scraperFailed++
				t.Errorf("the scraper at %v into the flood: %d, want 200", time.Duration(s)*time.Second/stepsPerSecond, code)
			}
		}
	}
	var total int64
	over := 0
	for sec, n := range perSecond {
		total += n
		// The bucket starts full: its burst (5) may go in the first second.
		limit := int64(5)
		if sec == 0 {
			limit = 10
		}
		if n > limit {
			if over++; over <= 3 {
				t.Errorf("second %d of the flood: %d TokenReviews of random tokens, want at most %d", sec, n, limit)
			}
		}
	}
	if over > 3 {
		t.Errorf("and %d more seconds over the budget", over-3)
	}
	t.Logf("%d random tokens over %d s: %d TokenReviews (%d refused as unauthenticated, %d throttled with 429); the scraper failed %d times",
		steps*perStep, len(perSecond), total, refused, throttled, scraperFailed)
	if total > int64(5*len(perSecond)+5) {
		t.Errorf("%d TokenReviews of random tokens in %d s, want at most %d", total, len(perSecond), 5*len(perSecond)+5)
	}
}
