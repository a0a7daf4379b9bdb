// Package drain is the termination gate: an HTTP endpoint that a pod's
// preStop hook calls, and that answers only once no zerodrop load balancer
// sends the pod new connections: every one has the pod's backends in drain
// or removed, as read back from the load balancer (invariant 6). The
// connections the pod still has go on; the pod closes them after SIGTERM,
// and the controller removes the backend at zero connections or at its
// drain timeout. The gate only waits and reports: it triggers nothing, so no
// caller can drain a live pod.
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
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/connguard"
	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
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
	// own shutdown after SIGTERM (DefaultShutdownBudget, at most a third of
	// the period).
	ShutdownBudget time.Duration
	// CacheLag is how long a pod that the cache does not show terminating
	// (or at all) is looked for again before the call is refused: the
	// kubelet runs the hook as soon as it sees the deletion, and this
	// replica's cache may see it a moment later (default 5s).
	CacheLag time.Duration
	// MaxCalls bounds the calls held at once for pods found terminating
	// (default DefaultMaxCalls); a call over it is refused at once with
	// 503. A last bound on memory, not the one that matters: a node drain
	// or a big rollout must fit in it (each pod's callers share one wait,
	// and a held call costs a goroutine and a connection, about 20 KiB).
	MaxCalls int
	// MaxCallsPerSource bounds the calls held at once from one source
	// address (default DefaultMaxCallsPerSource): a pod that floods the
	// endpoint fills its own quota, not the others'. The kubelet's calls of
	// a node's direct hooks come from the node's address, so it is above
	// the pods a node holds, times a few hooked containers each.
	MaxCallsPerSource int
	// MaxUnfoundCalls bounds the calls held at once whose pod is not found
	// terminating yet, each re-reading it for up to CacheLag (default
	// DefaultMaxUnfoundCalls, never more than MaxCalls); a call over it is
	// refused at once with 503. A budget of their own: calls naming pods
	// that do not exist cannot take the slots of terminating pods' calls.
	MaxUnfoundCalls int
	// KubeProxy reads the nodes' kube-proxy /healthz (node mode: a pod
	// reached through kube-proxy is safe from new connections once every
	// kube-proxy that may send to it has synced after its deletion). Nil:
	// /healthz is not reachable, and KubeProxyFallback is waited instead.
	KubeProxy *kubeproxy.Client
	// KubeProxyMargin is waited, after this replica's cache shows the pod's
	// endpoint change, for every kube-proxy to have watched and synced it
	// (default 2s: kube-proxy's --min-sync-period is 1 s).
	KubeProxyMargin time.Duration
	// KubeProxyFallback is how long after the pod's deletion the kube-proxy
	// path counts as synced when KubeProxy is nil (default 10s).
	KubeProxyFallback time.Duration
	// Recorder, when set, gets a Warning Event on the pod when its call
	// reaches its deadline undrained: the pod then stops while a load
	// balancer may still send it new connections.
	Recorder events.EventRecorder
	// Key returns the drain key (drain.PodToken); nil or empty: answers
	// carry no proof, and relays that expect one call again until their
	// deadline. A func, so the key can be loaded after the handler starts.
	Key func() []byte
	// Metrics counts the answers (nil: not counted).
	Metrics *metrics.Metrics
	Logger  logr.Logger
}

// DefaultMaxUnfoundCalls is the default of Options.MaxUnfoundCalls: above
// the pods one node can hold (the kubelet's default --max-pods is 110), so
// that a node drained at once, whose pods' calls may all come before this
// replica's cache shows their deletion, fits in it.
const DefaultMaxUnfoundCalls = 256

// DefaultMaxCalls and DefaultMaxCallsPerSource are the defaults of
// Options.MaxCalls and MaxCallsPerSource: 4096 held calls take about 80 MiB
// of the controller's 256 MiB, and 2,000 pods terminating at once fit.
const (
	DefaultMaxCalls          = 4096
	DefaultMaxCallsPerSource = 512
)

// DefaultShutdownBudget is the default of Options.ShutdownBudget.
const DefaultShutdownBudget = 5 * time.Second

// Handler serves GET /drain?pod=<namespace>/<name>[&uid=<uid>].
type Handler struct {
	opts    Options
	slots   chan struct{} // one per call held for a terminating pod; full: refuse
	unfound chan struct{} // one per call held whose pod is not found yet; full: refuse

	mu      sync.Mutex
	sources map[string]int      // calls held per source address
	polls   map[types.UID]*poll // the one wait loop of each pod being waited on
	held    map[uint64]time.Time
	next    uint64
}

// poll is the one wait loop of a pod, shared by all its callers (the
// hook of each container, a retry): K callers cost the provider what one does.
type poll struct {
	done    chan struct{} // closed when the fields below are final
	cancel  context.CancelFunc
	callers int // under Handler.mu
	drained bool
	desc    string // what was seen last, for the log
	err     error  // the last look's error, if it failed
}

// answerSlack is the time an answer takes to be written once decided.
const answerSlack = 2 * time.Second

// maxBackoff bounds the wait between two looks after provider errors.
const maxBackoff = 2 * time.Second

// NewHandler returns the endpoint's handler.
func NewHandler(opts Options) *Handler {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.ShutdownBudget <= 0 {
		opts.ShutdownBudget = DefaultShutdownBudget
	}
	if opts.CacheLag <= 0 {
		opts.CacheLag = 5 * time.Second
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	if opts.MaxCallsPerSource <= 0 {
		opts.MaxCallsPerSource = DefaultMaxCallsPerSource
	}
	if opts.MaxUnfoundCalls <= 0 {
		opts.MaxUnfoundCalls = DefaultMaxUnfoundCalls
	}
	opts.MaxUnfoundCalls = min(opts.MaxUnfoundCalls, opts.MaxCalls)
	if opts.KubeProxyMargin <= 0 {
		opts.KubeProxyMargin = 2 * time.Second
	}
	if opts.KubeProxyFallback <= 0 {
		opts.KubeProxyFallback = 10 * time.Second
	}
	return &Handler{opts: opts, slots: make(chan struct{}, opts.MaxCalls), unfound: make(chan struct{}, opts.MaxUnfoundCalls),
		sources: map[string]int{}, polls: map[types.UID]*poll{}, held: map[uint64]time.Time{}}
}

// ServeHTTP answers terse: any pod can call the endpoint, so the body says
// neither which pods exist nor what the load balancers hold; the structured
// log has the detail.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.answer(w, "bad", http.StatusMethodNotAllowed, "use GET")
		return
	}
	ns, name, ok := strings.Cut(r.URL.Query().Get("pod"), "/")
	if !ok || ns == "" || name == "" {
		h.answer(w, "bad", http.StatusBadRequest, "want ?pod=<namespace>/<name>")
		return
	}
	log := h.opts.Logger.WithValues("pod", ns+"/"+name)
	uid := types.UID(r.URL.Query().Get("uid"))
	if nonce := r.URL.Query().Get(NonceParam); nonce != "" && h.opts.Key != nil {
		if key := h.opts.Key(); len(key) > 0 {
			// A relay asks for a proof: every answer below carries one.
			w = &provingWriter{ResponseWriter: w, token: PodToken(key, ns, name), pod: ns + "/" + name, uid: string(uid), nonce: nonce}
		}
	}
	// Per source first: a flood from one pod must not take the slots of
	// the others' calls.
	source := sourceOf(r)
	if !h.enter(source) {
		log.Info("drain call refused: too many calls held from its source", "source", source, "max", h.opts.MaxCallsPerSource)
		h.busy(w)
		return
	}
	defer h.exit(source)
	// The pod is looked up before the call takes a slot: a call whose pod
	// is not found terminating takes one of the MaxUnfoundCalls, so that
	// calls naming pods that do not exist, each held CacheLag, cannot fill
	// the slots of terminating pods' calls.
	var id uint64
	defer func() {
		if id != 0 {
			h.release(id)
		}
	}()
	pod, err := h.lookup(r.Context(), ns, name, uid)
	if pod == nil {
		select {
		case h.unfound <- struct{}{}:
		default:
			log.Info("drain call refused: too many calls held for pods not found", "max", h.opts.MaxUnfoundCalls, "reason", err)
			h.busy(w)
			return
		}
		// Until it finds its pod, a call is held at most CacheLag.
		until := time.Now().Add(h.opts.CacheLag + h.opts.PollInterval)
		id = h.hold(until)
		h.extend(w, until)
		pod, err = h.terminating(r.Context(), ns, name, uid)
		<-h.unfound
		switch {
		case r.Context().Err() != nil:
			h.count("gone")
			return
		case errors.Is(err, errRefused):
			log.Info("drain call refused", "reason", err)
			h.answer(w, "refused", http.StatusNotFound, "no terminating pod of that name")
			return
		case err != nil:
			log.Error(err, "drain call: cannot read the pod")
			h.answer(w, "unavailable", http.StatusServiceUnavailable, "unavailable")
			return
		}
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		log.Info("drain call refused: too many calls held", "max", h.opts.MaxCalls)
		h.busy(w)
		return
	}
	// A call held for a terminating pod: its connection is no longer one
	// a flood's would evict (false: not a guarded connection).
	_ = connguard.TrustRequest(r)
	deadline := h.deadline(pod)
	if id == 0 {
		id = h.hold(deadline)
	} else {
		h.rehold(id, deadline)
	}
	// The answer is held until the deadline: the server's read and write
	// timeouts, meant for calls that are answered at once, must not cut it.
	h.extend(w, deadline)
	start := time.Now()
	drained, desc, lastErr := h.await(r.Context(), pod, deadline)
	switch {
	case drained:
		h.observeWait("drained", time.Since(start))
		log.Info("drained", "after", time.Since(start).Round(time.Millisecond))
		w.Header().Set(ResultHeader, "drained")
		h.answer(w, "drained", http.StatusOK, "drained")
	case r.Context().Err() != nil:
		// The caller went away (kubelet's own timeout); nothing to answer.
		log.Info("drain caller went away", "after", time.Since(start).Round(time.Millisecond), "targets", desc)
		h.count("gone")
	default:
		// The bound passed: let the pod stop rather than be killed mid-shutdown.
		h.observeWait("deadline", time.Since(start))
		log.Info("drain bound reached", "after", time.Since(start).Round(time.Millisecond), "targets", desc, "lastError", lastErr)
		if h.opts.Recorder != nil {
			h.opts.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "DrainDeadline", "Drain",
				"the load balancers had not stopped sending the pod new connections by its drain deadline (%s): %s",
				deadline.Format(time.RFC3339), desc)
		}
		w.Header().Set(ResultHeader, "timeout")
		h.answer(w, "timeout", http.StatusOK, "timeout")
	}
}

// sourceOf is the caller's address without its port.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// enter counts a call of source, unless it has MaxCallsPerSource held.
func (h *Handler) enter(source string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sources[source] >= h.opts.MaxCallsPerSource {
		return false
	}
	h.sources[source]++
	return true
}

func (h *Handler) exit(source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sources[source]--; h.sources[source] <= 0 {
		delete(h.sources, source)
	}
}

// busy refuses a call at once: too many are held.
func (h *Handler) busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	h.answer(w, "busy", http.StatusServiceUnavailable, "busy: too many drain calls held")
}

func (h *Handler) answer(w http.ResponseWriter, counted string, code int, body string) {
	h.count(counted)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, body)
}

func (h *Handler) observeWait(outcome string, d time.Duration) {
	if h.opts.Metrics != nil {
		h.opts.Metrics.DrainWait.WithLabelValues(outcome).Observe(d.Seconds())
	}
}

func (h *Handler) count(answer string) {
	if h.opts.Metrics == nil {
		return
	}
	h.opts.Metrics.DrainCalls.WithLabelValues(answer).Inc()
	outcome := "error"
	switch answer {
	case "drained":
		outcome = "drained"
	case "timeout":
		outcome = "deadline"
	case "refused":
		outcome = "unknown_pod"
	}
	h.opts.Metrics.DrainOutcomes.WithLabelValues(outcome).Inc()
}

// extend lets the connection's reads and writes run until the call's
// deadline (errors: a writer without deadlines, nothing to extend).
func (h *Handler) extend(w http.ResponseWriter, deadline time.Time) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline.Add(answerSlack))
	_ = rc.SetWriteDeadline(deadline.Add(answerSlack))
}

// hold records until when a new call may be held; a stopping replica
// answers until the longest of them.
func (h *Handler) hold(until time.Time) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.held[h.next] = until
	return h.next
}

// rehold moves a call's bound (once it has found its pod).
func (h *Handler) rehold(id uint64, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[id] = until
}

func (h *Handler) release(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, id)
}

// LongestDeadline is when the last call held now is answered at the latest
// (zero when none is held).
func (h *Handler) LongestDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	for _, d := range h.held {
		if d.After(last) {
			last = d
		}
	}
	return last
}

// errRefused: no terminating pod answers to the call.
var errRefused = errors.New("refused")

// terminating reads the pod until the cache shows it terminating, for at
// most CacheLag. Every refusal takes that long and is alike to the caller,
// so that the answer tells nothing of pods it has no business knowing.
func (h *Handler) terminating(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	giveUp := time.Now().Add(h.opts.CacheLag)
	for {
		pod, err := h.lookup(ctx, ns, name, uid)
		if pod != nil {
			return pod, nil
		}
		if time.Now().After(giveUp) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(h.opts.PollInterval):
		}
	}
}

// lookup reads the pod once: the pod when the cache shows it terminating
// (with uid, when given), else why not (errRefused, or the read's error).
// The cached pod is trimmed to what zerodrop reads (internal/podcache
// lists what the termination gate reads).
func (h *Handler) lookup(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := h.opts.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: pod %s/%s not found", errRefused, ns, name)
	case err != nil:
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	case uid != "" && uid != pod.UID:
		// The pod of that name is a newer one: the caller is gone.
		return nil, fmt.Errorf("%w: pod %s/%s has another uid", errRefused, ns, name)
	case pod.DeletionTimestamp == nil:
		return nil, fmt.Errorf("%w: pod %s/%s is not terminating", errRefused, ns, name)
	}
	return &pod, nil
}

// deadline leaves the container its shutdown budget of the grace period.
func (h *Handler) deadline(pod *corev1.Pod) time.Time {
	// DeletionTimestamp is when the kubelet kills the pod: the start of
	// deletion plus the grace period.
	return pod.DeletionTimestamp.Add(-ShutdownBudgetOf(lbtarget.GracePeriod(pod), h.opts.ShutdownBudget))
}

// ShutdownBudgetOf is what the gate keeps of a grace period for the
// container's own shutdown: budget, at most a third of the period.
func ShutdownBudgetOf(grace, budget time.Duration) time.Duration {
	return min(budget, grace/3)
}

// await waits for the pod's shared wait loop, or the caller's deadline, or
// the caller to go away; drained is the loop's verdict.
func (h *Handler) await(ctx context.Context, pod *corev1.Pod, deadline time.Time) (drained bool, desc string, lastErr error) {
	p := h.join(pod, deadline)
	defer h.leave(pod.UID, p)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-p.done:
		return p.drained, p.desc, p.err
	case <-ctx.Done():
	case <-t.C:
	}
	return false, "", nil
}

// join returns the pod's wait loop, started if none runs. The loop ends at
// the first caller's deadline: a later one of the same pod has the same or,
// if the pod's deletion was shortened, an earlier one (its own timer).
func (h *Handler) join(pod *corev1.Pod, deadline time.Time) *poll {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.polls[pod.UID]
	if p == nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		p = &poll{done: make(chan struct{}), cancel: cancel}
		h.polls[pod.UID] = p
		go func() {
			defer cancel()
			p.drained, p.desc, p.err = h.wait(ctx, pod)
			h.mu.Lock()
			if h.polls[pod.UID] == p {
				delete(h.polls, pod.UID)
			}
			h.mu.Unlock()
			close(p.done)
		}()
	}
	p.callers++
	return p
}

// leave ends the loop once no caller waits on it any more.
func (h *Handler) leave(uid types.UID, p *poll) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.callers--; p.callers == 0 {
		p.cancel()
		if h.polls[uid] == p {
			delete(h.polls, uid)
		}
	}
}
