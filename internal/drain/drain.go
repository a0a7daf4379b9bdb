// Package drain is the termination gate: an HTTP endpoint that a pod's
// preStop hook calls, and that answers only once every zerodrop load balancer
// has drained and removed the pod's backends (invariant 6). It only waits and
// reports: it triggers nothing, so no caller can drain a live pod.
package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Path is where the endpoint is served.
const Path = "/drain"

// Result header values: "drained" or "timeout".
const ResultHeader = "X-Zerodrop-Drain"

// Options configure the endpoint.
type Options struct {
	// Reader reads pods (the manager's cache: every replica has one).
	Reader client.Reader
	Finder *lbtarget.Finder
	// PollInterval between two looks at the load balancers (default 250ms).
	PollInterval time.Duration
	// ShutdownBudget is kept from the pod's grace period for the container's
	// own shutdown after SIGTERM (default 5s, at most a third of the period).
	ShutdownBudget time.Duration
	// CacheLag is how long a pod that the cache does not show terminating
	// (or at all) is looked for again before the call is refused: the
	// kubelet runs the hook as soon as it sees the deletion, and this
	// replica's cache may see it a moment later (default 5s).
	CacheLag time.Duration
	// MaxCalls bounds the calls held at once (default 1000); a call over it
	// is refused at once with 503.
	MaxCalls int
	// Metrics counts the answers (nil: not counted).
	Metrics *metrics.Metrics
	Logger  logr.Logger
}

// Handler serves GET /drain?pod=<namespace>/<name>[&uid=<uid>].
type Handler struct{ opts Options }

// NewHandler returns the endpoint's handler.
func NewHandler(opts Options) *Handler {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.ShutdownBudget <= 0 {
		opts.ShutdownBudget = 5 * time.Second
	}
	if opts.CacheLag <= 0 {
		opts.CacheLag = 5 * time.Second
	}
	return &Handler{opts: opts}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	ns, name, ok := strings.Cut(r.URL.Query().Get("pod"), "/")
	if !ok || ns == "" || name == "" {
		http.Error(w, "want ?pod=<namespace>/<name>", http.StatusBadRequest)
		return
	}
	pod, code, err := h.terminating(r.Context(), ns, name, types.UID(r.URL.Query().Get("uid")))
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	deadline := h.deadline(pod)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	log := h.opts.Logger.WithValues("pod", ns+"/"+name)
	start := time.Now()
	desc, err := h.wait(ctx, pod)
	switch {
	case err == nil:
		log.Info("drained", "after", time.Since(start).Round(time.Millisecond))
		w.Header().Set(ResultHeader, "drained")
		fmt.Fprintf(w, "drained after %s\n", time.Since(start).Round(time.Millisecond))
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		// The bound passed: let the pod stop rather than be killed mid-shutdown.
		log.Info("drain bound reached", "after", time.Since(start).Round(time.Millisecond), "targets", desc)
		w.Header().Set(ResultHeader, "timeout")
		fmt.Fprintf(w, "not drained within the pod's grace period: %s\n", desc)
	case r.Context().Err() != nil:
		// The caller went away (kubelet's own timeout); nothing to answer.
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

// terminating reads the pod until the cache shows it terminating, for at most
// CacheLag; otherwise it returns the HTTP status and the reason to refuse.
func (h *Handler) terminating(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, int, error) {
	giveUp := time.Now().Add(h.opts.CacheLag)
	for {
		var pod corev1.Pod
		err := h.opts.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod)
		var code int
		switch {
		case apierrors.IsNotFound(err):
			code, err = http.StatusNotFound, fmt.Errorf("pod %s/%s not found", ns, name)
		case err != nil:
			return nil, http.StatusServiceUnavailable, err
		case uid != "" && uid != pod.UID:
			// The pod of that name is a newer one: the caller is gone.
			return nil, http.StatusConflict, fmt.Errorf("pod %s/%s has another uid", ns, name)
		case pod.DeletionTimestamp == nil:
			code, err = http.StatusConflict, fmt.Errorf("pod %s/%s is not terminating", ns, name)
		default:
			return &pod, 0, nil
		}
		if time.Now().After(giveUp) {
			return nil, code, err
		}
		select {
		case <-ctx.Done():
			return nil, code, err
		case <-time.After(h.opts.PollInterval):
		}
	}
}

// deadline leaves the container its shutdown budget of the grace period.
func (h *Handler) deadline(pod *corev1.Pod) time.Time {
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	budget := h.opts.ShutdownBudget
	if budget > grace/3 {
		budget = grace / 3
	}
	// DeletionTimestamp is when the kubelet kills the pod: the start of
	// deletion plus the grace period.
	return pod.DeletionTimestamp.Add(-budget)
}

// wait returns nil once no load balancer has the pod's backend any more and,
// where the provider says its data plane follows removals with a delay
// (provider.Settler), that delay has passed since the removal was seen.
func (h *Handler) wait(ctx context.Context, pod *corev1.Pod) (string, error) {
	ticker := time.NewTicker(h.opts.PollInterval)
	defer ticker.Stop()
	desc := ""
	var removedSince time.Time
	for {
		targets, err := h.opts.Finder.Targets(ctx, pod)
		if err != nil && ctx.Err() == nil {
			return desc, err
		}
		if err == nil {
			desc = lbtarget.Describe(targets)
			if !removed(targets) {
				removedSince = time.Time{}
			} else {
				if removedSince.IsZero() {
					removedSince = time.Now()
				}
				settle := h.settle(targets)
				if time.Since(removedSince) >= settle {
					return desc, nil
				}
				desc = fmt.Sprintf("removed; the load balancer settles for %s", settle)
			}
		}
		select {
		case <-ctx.Done():
			return desc, ctx.Err()
		case <-ticker.C:
		}
	}
}

// settle is the longest removal delay of the pod's IP-mode load balancers.
func (h *Handler) settle(targets []lbtarget.Target) time.Duration {
	s, ok := h.opts.Finder.Provider.(provider.Settler)
	if !ok {
		return 0
	}
	var d time.Duration
	for _, t := range targets {
		if !t.Node {
			d = max(d, s.RemovalSettle(t.LB, t.Listener))
		}
	}
	return d
}

// removed: no IP-mode load balancer has the pod's backend. A node-mode
// backend is the node, shared with other pods, and stays.
func removed(targets []lbtarget.Target) bool {
	for _, t := range targets {
		if !t.Node && t.Registered {
			return false
		}
	}
	return true
}

// Server serves the endpoint in every replica: the standby answers from the
// provider's state too.
type Server struct {
	Addr    string
	Handler http.Handler
	Logger  logr.Logger
	// ShutdownTimeout bounds how long calls in flight when the replica stops
	// are still answered (default 30s, the default grace period of a pod).
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout of the HTTP server.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration

	mu       sync.Mutex
	finished chan struct{} // closed once the server has shut down
}

// NeedLeaderElection: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx is done. It returns as soon as the listener is
// closed, so that the manager goes on stopping (and releases the leader
// lease) at once; calls in flight are still answered in the background
// until Wait returns. Cutting them would make the kubelet run the pod's
// preStop hook to an error and stop the pod while it may still be in a load
// balancer.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle(Path, s.Handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("drain endpoint: %w", err)
	}
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	finished := make(chan struct{})
	s.mu.Lock()
	s.finished = finished
	s.mu.Unlock()
	s.Logger.Info("serving the drain endpoint", "addr", ln.Addr().String())
	go func() {
		defer close(finished)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			s.Logger.Info("drain calls still in flight cut at shutdown", "after", timeout, "err", err)
			_ = srv.Close()
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Wait blocks until the calls in flight when Start's context ended have been
// answered (or cut after ShutdownTimeout); at once if Start never ran.
func (s *Server) Wait() {
	s.mu.Lock()
	finished := s.finished
	s.mu.Unlock()
	if finished != nil {
		<-finished
	}
}
