// Package podgate sets the readiness gate condition
// zerodrop.dev/load-balancer-ready on pods that carry the gate: True only
// once every zerodrop load balancer that selects the pod has registered it
// and, where the provider reports health, sees it healthy (invariant 5).
package podgate

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
)

// ConditionType is the pod readiness gate zerodrop owns.
const ConditionType corev1.PodConditionType = "zerodrop.dev/load-balancer-ready"

// Options configure the readiness-gate controller.
type Options struct {
	Finder *lbtarget.Finder
	// APIReader reads a pod past the cache when the gate's write conflicts
	// (default: the manager's API reader).
	APIReader client.Reader
	// PollInterval is how often a pod that is not served yet is checked again
	// (default 500ms) for its first seconds; then the checks back off in
	// proportion to the time waited, up to MaxPollInterval (backoff.go).
	PollInterval time.Duration
	// MaxPollInterval caps the back-off of the checks of a pod that stays
	// unserved (default 10 × PollInterval: 5s with the default), reached
	// once the pod has waited ten times as long.
	MaxPollInterval time.Duration
	// ReadQPS bounds the provider reads of this controller (default 20),
	// shared equally by the namespaces with pods waiting (fairqueue.go).
	ReadQPS float64
	// Latency, when set, observes how long the gate held each pod back
	// (zerodrop_readiness_gate_seconds).
	Latency prometheus.Observer
	// Unserved, when set, is the gauge of the pods the gate keeps checking
	// because they are not served yet, by namespace
	// (zerodrop_readiness_gate_unserved_pods).
	Unserved *prometheus.GaugeVec
	Logger   logr.Logger
}

// Reconciler flips the readiness gate of one pod.
type Reconciler struct {
	client  client.Client
	opts    Options
	limiter *rate.Limiter
	// unserved holds the pods not served at their last check: their
	// back-off and the per-namespace gauge.
	unserved *unservedPods
}

// Setup registers the controller with mgr (it runs in the leader only).
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 500 * time.Millisecond
	}
	if opts.MaxPollInterval == 0 {
		opts.MaxPollInterval = 10 * opts.PollInterval
	}
	if opts.MaxPollInterval < opts.PollInterval {
		return fmt.Errorf("readiness gate: MaxPollInterval %s is shorter than PollInterval %s", opts.MaxPollInterval, opts.PollInterval)
	}
	if opts.ReadQPS <= 0 {
		opts.ReadQPS = 20
	}
	if opts.APIReader == nil {
		opts.APIReader = mgr.GetAPIReader()
	}
	r := &Reconciler{client: mgr.GetClient(), opts: opts, limiter: rate.NewLimiter(rate.Limit(opts.ReadQPS), int(opts.ReadQPS)),
		unserved: newUnservedPods(opts.Unserved)}
	return ctrl.NewControllerManagedBy(mgr).
		Named("zerodrop-podgate").
		WithOptions(controller.Options{
			// Tests run several controllers in one process.
			SkipNameValidation: ptr.To(true),
			// One namespace's pods cannot starve another's (issue 46, M7).
			NewQueue: newFairQueue,
		}).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(e event.CreateEvent) bool { return pending(e.Object.(*corev1.Pod)) },
			UpdateFunc:  func(e event.UpdateEvent) bool { return pending(e.ObjectNew.(*corev1.Pod)) },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// HasGate reports whether the pod asks for zerodrop's readiness gate.
func HasGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == ConditionType {
			return true
		}
	}
	return false
}

func conditionTrue(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == ConditionType {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pending: the pod has the gate, it is not True yet, and the pod can be
// served (it has an address and is not going away).
func pending(pod *corev1.Pod) bool {
	return HasGate(pod) && !conditionTrue(pod) && pod.DeletionTimestamp == nil && pod.Status.PodIP != ""
}

// maxAttempts bounds the re-reads after conflicting writes in one reconcile;
// past it the work queue retries with backoff.
const maxAttempts = 3

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.opts.Logger.WithValues("pod", req.NamespacedName)
	var pod corev1.Pod
	if err := r.client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.unserved.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	for attempt := 1; ; attempt++ {
		res, err := r.open(ctx, log, &pod)
		if !apierrors.IsConflict(err) || attempt == maxAttempts {
			return res, err
		}
		// The pod changed since it was read — typically a kubelet's condition
		// the cache has not seen yet. Decide again on the apiserver's pod.
		log.V(1).Info("pod changed since it was read; reading it again", "err", err)
		reader := r.opts.APIReader
		if reader == nil {
			reader = r.client
		}
		pod = corev1.Pod{}
		if err := reader.Get(ctx, req.NamespacedName, &pod); err != nil {
			if apierrors.IsNotFound(err) {
				r.unserved.forget(req.NamespacedName)
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
}

// open sets the gate True if every load balancer selecting the pod serves
// it. The write is a merge patch that carries the pod's resourceVersion: a
// merge patch replaces the whole conditions list, so without the lock a pod
// read before the kubelet's last write would bring its old conditions back
// (ContainersReady True again). A conflict is returned as such. The pod
// read from the cache is trimmed (internal/podcache): the patch is the
// difference between two copies of it, so what the cache dropped is in
// neither and the server keeps it; the conditions are cached whole.
func (r *Reconciler) open(ctx context.Context, log logr.Logger, pod *corev1.Pod) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(pod)
	if !pending(pod) {
		r.unserved.forget(key)
		return reconcile.Result{}, nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return reconcile.Result{}, err
	}
	targets, err := r.opts.Finder.Targets(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	served, reason, msg := verdict(targets)
	if !served {
		misses, next := r.unserved.miss(key, r.opts.nextCheck)
		log.V(2).Info("not served yet", "targets", lbtarget.Describe(targets), "checks", misses, "nextCheck", next)
		return reconcile.Result{RequeueAfter: next}, nil
	}
	orig := pod.DeepCopy()
	setCondition(pod, corev1.PodCondition{Type: ConditionType, Status: corev1.ConditionTrue,
		Reason: reason, Message: msg, LastTransitionTime: metav1.Now()})
	if err := r.client.Status().Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, fmt.Errorf("set readiness gate of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.unserved.forget(key)
	log.V(1).Info("load balancers serve the pod", "targets", lbtarget.Describe(targets))
	if r.opts.Latency != nil {
		if since, ok := containersReadySince(orig); ok {
			r.opts.Latency.Observe(max(time.Since(since).Seconds(), 0))
		}
	}
	return reconcile.Result{}, nil
}

// containersReadySince is when the pod's containers turned ready: from then
// on only the gate kept the pod from Ready.
func containersReadySince(pod *corev1.Pod) (time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// verdict decides the gate from what the load balancers report. In node mode
// with externalTrafficPolicy Local the node must be registered and active
// (the controller enables it once the pod's endpoint is there, ready or
// not), not healthy: its health check answers only once a local pod is
// ready, which waits for this gate (invariant 5).
func verdict(targets []lbtarget.Target) (bool, string, string) {
	if len(targets) == 0 {
		return true, "NoLoadBalancer", "no zerodrop load balancer selects this pod"
	}
	for _, t := range targets {
		if t.GateOnly {
			if !gateOnlyServed(t) {
				return false, "", ""
			}
			continue
		}
		if !t.Registered || (!t.NodeOnly && !t.Healthy) || (t.NodeOnly && t.State != model.Active) {
			return false, "", ""
		}
	}
	return true, "LoadBalancerServing", "every zerodrop load balancer selecting this pod serves it: " + lbtarget.Describe(targets)
}

// gateOnlyServed decides a gate-only Service's target (another controller
// writes its load balancer; the backend is the pod's node): the node in the
// rule's pool and not admin Down, as read back; with externalTrafficPolicy
// Local and a ready sibling on the node, also probed Up (Healthy: rule
// health, or the pool alone where rule health is unknown). Without a ready
// sibling the node's probe answers only once this pod is Ready, which waits
// for this gate: waiting for it would be a cycle (invariant 5). Cluster:
// kube-proxy programs the pod only once it is Ready, which nothing can read
// before: the pool only.
func gateOnlyServed(t lbtarget.Target) bool {
	if !t.Registered || t.State != model.Active {
		return false
	}
	return !(t.NodeOnly && t.ReadySibling) || t.Healthy
}

func setCondition(pod *corev1.Pod, c corev1.PodCondition) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == c.Type {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}
