package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

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
// binary 30 MB larger.
func metricsAuth(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, why := authorize(r, cs)
			if code != http.StatusOK {
				log.V(1).Info("metrics request refused", "code", code, "reason", why, "remote", r.RemoteAddr)
				http.Error(w, http.StatusText(code), code)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// reviewCache configures a reviewer's caches.
type reviewCache struct {
	// AllowTTL is how long an authenticated token and an allowed decision
	// are kept, DenyTTL a refused token and a denied decision.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds each cache.
	MaxEntries int
	// Now is the caches' clock.
	Now func() time.Time
}

// reviewer authorizes metrics requests through the API server's reviews.
type reviewer struct {
	cs   kubernetes.Interface
	opts reviewCache
}

func newReviewer(cs kubernetes.Interface, opts reviewCache) *reviewer {
	return &reviewer{cs: cs, opts: opts}
}

// authorize is authorize's, through rv's client.
func (rv *reviewer) authorize(r *http.Request) (int, string) { return authorize(r, rv.cs) }

// reviewTimeout bounds each review call to the API server.
const reviewTimeout = 10 * time.Second

// authorize answers 200 for a request that may read, 401 for one without
// an accepted token, 403 for a user not allowed, 503 when the API server
// could not be asked; and why.
func authorize(r *http.Request, cs kubernetes.Interface) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return http.StatusUnauthorized, "no bearer token"
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(token)}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable, "token review: " + err.Error()
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, "token not authenticated: " + tr.Status.Error
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: strings.ToLower(r.Method)},
		}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable, "subject access review: " + err.Error()
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, fmt.Sprintf("%s may not %s %s: %s", u.Username, strings.ToLower(r.Method), r.URL.Path, sar.Status.Reason)
	}
	return http.StatusOK, ""
}
