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
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
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
	// MaxCalls bounds the calls held at once for pods found terminating
	// (default 1000); a call over it is refused at once with 503.
	MaxCalls int
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
	// Metrics counts the answers (nil: not counted).
	Metrics *metrics.Metrics
	Logger  logr.Logger
}

// DefaultMaxUnfoundCalls is the default of Options.MaxUnfoundCalls: above
// the pods one node can hold (the kubelet's default --max-pods is 110), so
// that a node drained at once, whose pods' calls may all come before this
// replica's cache shows their deletion, fits in it.
const DefaultMaxUnfoundCalls = 256

// Handler serves GET /drain?pod=<namespace>/<name>[&uid=<uid>].
type Handler struct {
	opts    Options
	slots   chan struct{} // one per call held for a terminating pod; full: refuse
	unfound chan struct{} // one per call held whose pod is not found yet; full: refuse

	mu    sync.Mutex
	polls map[types.UID]*poll // the one wait loop of each pod being waited on
	held  map[uint64]time.Time
	next  uint64
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
		opts.ShutdownBudget = 5 * time.Second
	}
	if opts.CacheLag <= 0 {
		opts.CacheLag = 5 * time.Second
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = 1000
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
		polls: map[types.UID]*poll{}, held: map[uint64]time.Time{}}
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
	grace := gracePeriod(pod)
	budget := h.opts.ShutdownBudget
	if budget > grace/3 {
		budget = grace / 3
	}
	// DeletionTimestamp is when the kubelet kills the pod: the start of
	// deletion plus the grace period.
	return pod.DeletionTimestamp.Add(-budget)
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

// wait returns true once no load balancer sends the pod's backend new
// connections (each has it in drain or no more) and, where the provider says
// its data plane follows changes with a delay (provider.Settler), that delay
// has passed since it was seen. A
// failed look (HAProxy's socket busy in a reload, Azure throttling) is
// looked at again, later each time: only ctx's deadline ends the wait.
func (h *Handler) wait(ctx context.Context, pod *corev1.Pod) (bool, string, error) {
	log := h.opts.Logger.WithValues("pod", pod.Namespace+"/"+pod.Name)
	desc := ""
	var lastErr error
	var removedSince time.Time
	pw := &proxyWait{synced: map[string]bool{}}
	backoff := h.opts.PollInterval
	for {
		next := h.opts.PollInterval
		targets, err := h.opts.Finder.Targets(ctx, pod)
		switch {
		case err != nil && ctx.Err() != nil:
			return false, desc, lastErr
		case err != nil:
			if lastErr == nil {
				log.Info("drain: load balancer read failed, looking again until the deadline", "err", err)
			}
			lastErr = err
			next, backoff = backoff, min(2*backoff, max(maxBackoff, h.opts.PollInterval))
			if ra := (*provider.RetryAfterError)(nil); errors.As(err, &ra) && ra.After > next {
				next = ra.After
			}
		default:
			lastErr, backoff = nil, h.opts.PollInterval
			desc = lbtarget.Describe(targets)
			if !noNewConnections(targets) {
				removedSince = time.Time{}
				break
			}
			if waiting, err := h.proxiesSynced(ctx, pod, targets, pw); err != nil || waiting > 0 {
				if ctx.Err() != nil {
					// The call was answered or went away: nothing to log.
					return false, desc, lastErr
				}
				if err != nil {
					if lastErr == nil {
						log.Info("drain: kube-proxy healthz not answering, looking again until the deadline", "err", err)
					}
					lastErr = err
				}
				desc = fmt.Sprintf("%s; waiting for kube-proxy on %d node(s) to sync", desc, waiting)
				break
			}
			if removedSince.IsZero() {
				removedSince = time.Now()
			}
			settle := h.settle(targets)
			if time.Since(removedSince) >= settle {
				return true, desc, nil
			}
			desc = fmt.Sprintf("draining; the load balancer settles for %s", settle)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, desc, lastErr
		case <-t.C:
		}
	}
}

// proxyWait is what a wait loop remembers of kube-proxy between two looks.
type proxyWait struct {
	synced      map[string]bool // nodes whose kube-proxy synced after the deletion began
	publishedAt time.Time       // when this replica's cache first showed the endpoint change
}

// proxiesSynced counts the nodes of node-mode targets (Target.Sending) that
// may still send the pod new connections through kube-proxy. There is no
// exact signal that a kube-proxy has programmed a change; the heuristic is:
//
//   - this replica's cache shows the pod's endpoint terminating (or gone):
//     the change is written, and every kube-proxy watches it as this cache
//     does;
//   - every such kube-proxy answers /healthz with a sync of the pod's IP
//     family that ended after the pod's deletion began: it is alive and
//     syncing (one that does not answer keeps the call waiting, until the
//     load balancer's probe takes its node out of Sending, or the deadline);
//   - KubeProxyMargin has passed since the cache showed the change: the time
//     for kube-proxy's watch and its sync, which follows a change within its
//     --min-sync-period (1 s by default).
//
// It does not wait for a sync after the change plus a margin: kube-proxy in
// nftables mode syncs only on changes (and hourly), so a change synced within
// the margin would hold the call to its deadline (the lab's kube-proxy test
// saw it).
func (h *Handler) proxiesSynced(ctx context.Context, pod *corev1.Pod, targets []lbtarget.Target, pw *proxyWait) (int, error) {
	started := deletionStart(pod)
	family := "IPv4"
	if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil && a.Unmap().Is6() {
		family = "IPv6"
	}
	waiting, published, sending := 0, true, false
	var lastErr error
	seen := map[string]bool{}
	for _, t := range targets {
		if len(t.Sending) > 0 {
			sending = true
			published = published && t.ChangePublished
		}
		for _, node := range t.Sending {
			if pw.synced[node] || seen[node] {
				continue
			}
			seen[node] = true
			if h.opts.KubeProxy == nil {
				if time.Now().After(started.Add(h.opts.KubeProxyFallback)) {
					pw.synced[node] = true
				} else {
					waiting++
				}
				continue
			}
			ok, err := h.opts.KubeProxy.SyncedAfter(ctx, node, family, started)
			switch {
			case err != nil:
				lastErr = err
				waiting++
			case ok:
				pw.synced[node] = true
			default:
				waiting++
			}
		}
	}
	if !sending {
		return 0, nil
	}
	switch {
	case !published:
		pw.publishedAt = time.Time{}
		return max(waiting, 1), lastErr
	case pw.publishedAt.IsZero():
		pw.publishedAt = time.Now()
	}
	if h.opts.KubeProxy != nil && time.Since(pw.publishedAt) < h.opts.KubeProxyMargin {
		return max(waiting, 1), lastErr
	}
	return waiting, lastErr
}

// deletionStart is when the pod's deletion began: DeletionTimestamp is when
// the kubelet kills it, the start plus the grace period.
func deletionStart(pod *corev1.Pod) time.Time {
	if pod.DeletionTimestamp == nil {
		return time.Time{}
	}
	return pod.DeletionTimestamp.Add(-gracePeriod(pod))
}

// gracePeriod is the pod's deletion grace period, the Kubernetes default of
// 30 s when the pod does not say.
func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// settle is the longest removal delay of the pod's IP-mode load balancers.
func (h *Handler) settle(targets []lbtarget.Target) time.Duration {
	s, ok := h.opts.Finder.Provider.(provider.Settler)
	if !ok {
		s = noSettle{}
	}
	var d time.Duration
	for _, t := range targets {
		switch {
		case t.GateOnly:
			// Drained by the pool (the node out of it, or admin Down) as ARM
			// reports it applied: the data plane takes it on later. Drained
			// by the probe Down: that is the data plane's own state.
			if t.LastLocal && (!t.Registered || t.State != model.Active) {
				d = max(d, t.Settle)
			}
		case !t.Node || t.LastLocal:
			d = max(d, s.RemovalSettle(t.LB, t.Listener))
		}
	}
	return d
}

// noNewConnections: no load balancer has the pod's own backend active: each
// has it in drain (or maintenance, on its way out) or not at all, as the
// provider reads it back (for a gate-only Service, or its probe Down). In node mode that backend is the node, and it is
// the pod's own only when the pod is its node's last local endpoint of an
// externalTrafficPolicy Local Service (Target.LastLocal); otherwise the node
// stays and kube-proxy is what must stop sending (proxiesSynced).
func noNewConnections(targets []lbtarget.Target) bool {
	for _, t := range targets {
		// A gate-only Service's last local pod: its node stays in the other
		// controller's pool, active; the node's probe Down, read back after
		// the deletion began, is what says the load balancer stopped.
		if (!t.Node || t.LastLocal) && t.Registered && t.State == model.Active && !(t.GateOnly && t.ProbedDown) {
			return false
		}
	}
	return true
}

// noSettle is the settle of a provider without one.
type noSettle struct{}

func (noSettle) RemovalSettle(string, string) time.Duration { return 0 }
