package controller

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsAuth is the metrics server's filter with --metrics-secure: a
// request passes with a bearer token the API server accepts (TokenReview)
// for a user it allows the request's verb on the path (SubjectAccessReview,
// a non-resource URL: what a ClusterRole with nonResourceURLs /metrics
// grants). It does what controller-runtime's filters package does, through
// client-go alone: that package links k8s.io/apiserver, which made the
// binary 30 MB larger. Like the delegating authenticator and authorizer
// behind that package, it caches both reviews (reviewer), so a scraper
// costs the API server two reviews per allow TTL, not per scrape. Tokens
// not in the cache are reviewed at most ReviewRate a second (a token
// bucket): a flood of random tokens is refused with 429 beyond that, without
// a review, while a token the API server authenticated before is reviewed
// outside that budget (so the real scraper is served through a flood).
func metricsAuth(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	rv := newReviewer(cs, reviewCache{})
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, why := rv.authorize(r)
			if code != http.StatusOK {
				log.V(1).Info("metrics request refused", "code", code, "reason", why, "remote", r.RemoteAddr)
				http.Error(w, http.StatusText(code), code)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// The defaults of reviewCache.
const (
	defaultAllowTTL   = 2 * time.Minute
	defaultDenyTTL    = 10 * time.Second
	defaultMaxEntries = 1024
	// defaultReviewRate and defaultReviewBurst: TokenReviews a second for
	// tokens the cache does not know, and the bucket's size.
	defaultReviewRate  = 5
	defaultReviewBurst = 5
	// knownTTL is how long a token the API server authenticated stays
	// "known" (its reviews skip the budget) after its last review.
	knownTTL = 24 * time.Hour
)

// reviewCache configures a reviewer's caches. Zero values get the defaults.
type reviewCache struct {
	// AllowTTL is how long an authenticated token and an allowed decision
	// are kept (default 2 min), DenyTTL a token the API server did not
	// authenticate and a denied decision (default 10 s). So a revoked token
	// or binding still reads the metrics for up to AllowTTL, and a new
	// binding takes up to DenyTTL after a refusal.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds each cache (default 1024); when one is full, its
	// expired entries go, then its oldest.
	MaxEntries int
	// ReviewRate and ReviewBurst bound the TokenReviews of tokens neither
	// cached nor authenticated before (default 5 a second, burst 5): beyond
	// them a request is refused with 429 and the API server is not asked.
	ReviewRate  rate.Limit
	ReviewBurst int
	// Now is the caches' and the budget's clock (default time.Now).
	Now func() time.Time
}

// reviewer authorizes metrics requests through the API server's reviews,
// caching their answers: token reviews by a salted SHA-256 of the token (the
// token itself is never kept), decisions by user (name, UID, groups, extra),
// path and verb. An API error is never cached.
type reviewer struct {
	cs        kubernetes.Interface
	opts      reviewCache
	salt      [32]byte
	tokens    *ttlCache[tokenReview]
	decisions *ttlCache[decision]
	// known holds the keys of tokens the API server authenticated (for
	// knownTTL, bounded like the caches): their reviews skip budget.
	known  *ttlCache[struct{}]
	budget *rate.Limiter
}

// errThrottled is a review not made: the budget for unknown tokens is spent.
var errThrottled = errors.New("too many unknown tokens: TokenReview budget spent")

// tokenReview is what a TokenReview said of a token.
type tokenReview struct {
	authenticated bool
	user          authenticationv1.UserInfo
	err           string
}

// decision is what a SubjectAccessReview said.
type decision struct {
	allowed bool
	reason  string
}

func newReviewer(cs kubernetes.Interface, opts reviewCache) *reviewer {
	if opts.AllowTTL <= 0 {
		opts.AllowTTL = defaultAllowTTL
	}
	if opts.DenyTTL <= 0 {
		opts.DenyTTL = defaultDenyTTL
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = defaultMaxEntries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReviewRate <= 0 {
		opts.ReviewRate = defaultReviewRate
	}
	if opts.ReviewBurst <= 0 {
		opts.ReviewBurst = defaultReviewBurst
	}
	rv := &reviewer{cs: cs, opts: opts,
		tokens:    newTTLCache[tokenReview](opts.MaxEntries, opts.Now),
		decisions: newTTLCache[decision](opts.MaxEntries, opts.Now),
		known:     newTTLCache[struct{}](opts.MaxEntries, opts.Now),
		budget:    rate.NewLimiter(opts.ReviewRate, opts.ReviewBurst)}
	// crypto/rand.Read does not fail (it panics if the system's source does).
	_, _ = rand.Read(rv.salt[:])
	return rv
}

// reviewTimeout bounds each review call to the API server.
const reviewTimeout = 10 * time.Second

// authorize answers 200 for a request that may read, 401 for one without
// an accepted token, 403 for a user not allowed, 429 for an unknown token
// over the review budget, 503 when the API server could not be asked; and
// why.
func (rv *reviewer) authorize(r *http.Request) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return http.StatusUnauthorized, "no bearer token"
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	tr, err := rv.reviewToken(ctx, token)
	if errors.Is(err, errThrottled) {
		return http.StatusTooManyRequests, err.Error()
	}
	if err != nil {
		return http.StatusServiceUnavailable, "token review: " + err.Error()
	}
	if !tr.authenticated {
		return http.StatusUnauthorized, "token not authenticated: " + tr.err
	}
	verb := strings.ToLower(r.Method)
	d, err := rv.reviewAccess(ctx, tr.user, r.URL.Path, verb)
	if err != nil {
		return http.StatusServiceUnavailable, "subject access review: " + err.Error()
	}
	if !d.allowed {
		return http.StatusForbidden, fmt.Sprintf("%s may not %s %s: %s", tr.user.Username, verb, r.URL.Path, d.reason)
	}
	return http.StatusOK, ""
}

// reviewToken is the TokenReview of token, from the cache when it holds one.
func (rv *reviewer) reviewToken(ctx context.Context, token string) (tokenReview, error) {
	h := sha256.New()
	h.Write(rv.salt[:])
	h.Write([]byte(token))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	if v, ok := rv.tokens.get(key); ok {
		return v, nil
	}
	// A token not known to be good spends the budget: a flood of random
	// tokens costs the API server at most ReviewRate reviews a second.
	if _, ok := rv.known.get(key); !ok && !rv.budget.AllowN(rv.opts.Now(), 1) {
		return tokenReview{}, errThrottled
	}
	tr, err := rv.cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return tokenReview{}, err
	}
	v := tokenReview{authenticated: tr.Status.Authenticated, user: tr.Status.User, err: tr.Status.Error}
	rv.tokens.put(key, v, rv.ttl(v.authenticated))
	if v.authenticated {
		rv.known.put(key, struct{}{}, knownTTL)
	}
	return v, nil
}

// reviewAccess is the SubjectAccessReview of u's verb on the non-resource
// path, from the cache when it holds one.
func (rv *reviewer) reviewAccess(ctx context.Context, u authenticationv1.UserInfo, path, verb string) (decision, error) {
	// JSON encodes the extra map's keys sorted: one request, one key.
	b, err := json.Marshal(struct {
		User       authenticationv1.UserInfo
		Path, Verb string
	}{u, path, verb})
	if err != nil {
		return decision{}, err
	}
	key := sha256.Sum256(b)
	if d, ok := rv.decisions.get(key); ok {
		return d, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := rv.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, err
	}
	d := decision{allowed: sar.Status.Allowed, reason: sar.Status.Reason}
	rv.decisions.put(key, d, rv.ttl(d.allowed))
	return d, nil
}

func (rv *reviewer) ttl(allowed bool) time.Duration {
	if allowed {
		return rv.opts.AllowTTL
	}
	return rv.opts.DenyTTL
}

// ttlCache is a bounded map whose entries expire. When it is full, a put
// drops the expired entries, then the oldest ones.
type ttlCache[V any] struct {
	mu      sync.Mutex
	max     int
	now     func() time.Time
	entries map[[sha256.Size]byte]*list.Element
	order   *list.List // of *ttlEntry[V], oldest first
}

type ttlEntry[V any] struct {
	key     [sha256.Size]byte
	value   V
	expires time.Time
}

func newTTLCache[V any](max int, now func() time.Time) *ttlCache[V] {
	return &ttlCache[V]{max: max, now: now, entries: map[[sha256.Size]byte]*list.Element{}, order: list.New()}
}

func (c *ttlCache[V]) get(key [sha256.Size]byte) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.entries[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*ttlEntry[V])
	if !c.now().Before(e.expires) {
		c.remove(el)
		return zero, false
	}
	return e.value, true
}

func (c *ttlCache[V]) put(key [sha256.Size]byte, v V, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.remove(el)
	}
	now := c.now()
	if c.order.Len() >= c.max {
		for el := c.order.Front(); el != nil; {
			next := el.Next()
			if !now.Before(el.Value.(*ttlEntry[V]).expires) {
				c.remove(el)
			}
			el = next
		}
	}
	for c.order.Len() >= c.max {
		c.remove(c.order.Front())
	}
	c.entries[key] = c.order.PushBack(&ttlEntry[V]{key: key, value: v, expires: now.Add(ttl)})
}

func (c *ttlCache[V]) remove(el *list.Element) {
	delete(c.entries, el.Value.(*ttlEntry[V]).key)
	c.order.Remove(el)
}
