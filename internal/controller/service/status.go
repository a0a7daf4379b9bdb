package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"zerodrop.dev/zerodrop/internal/model"
)

// Event reasons (stable: users alert on them).
const (
	ReasonEnsured             = "EnsuredLoadBalancer"
	ReasonDeleted             = "DeletedLoadBalancer"
	ReasonInvalidAnnotations  = "InvalidAnnotations"
	ReasonUnsupportedProtocol = "UnsupportedProtocol"
	ReasonSyncFailed          = "SyncLoadBalancerFailed"
	// ReasonUnrepresentable: the provider cannot express what the Service
	// asks for (provider.Validator).
	ReasonUnrepresentable = "Unrepresentable"
	// ReasonOverLimit: the Service is over a cap of the controller
	// (model.Limits: ports); ReasonHealthChecksStretched: its check
	// intervals are stretched to fit the check-rate caps (issue 46, M8).
	ReasonOverLimit             = "OverLimit"
	ReasonHealthChecksStretched = "HealthChecksStretched"
)

type loggerKey struct{}

func withLogger(ctx context.Context, log logr.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

func logFrom(ctx context.Context) logr.Logger {
	if l, ok := ctx.Value(loggerKey{}).(logr.Logger); ok {
		return l
	}
	return logr.Discard()
}

func hasFinalizer(svc *corev1.Service) bool {
	return controllerutil.ContainsFinalizer(svc, Finalizer)
}

func (c *Controller) slices(ctx context.Context, svc *corev1.Service) ([]*discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.cache.List(ctx, &list, client.InNamespace(svc.Namespace),
		client.MatchingFields{sliceServiceIndex: svc.Name}); err != nil {
		return nil, fmt.Errorf("list endpointslices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	out := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// ensureFinalizer is added before the provider creates anything, so that a
// deleted Service cannot leave a load balancer behind. It is added with
// AnnotationFinalizedBy naming this controller's class: every zerodrop
// controller uses the one Finalizer, and a controller of another class must
// leave it (and the Service's status) alone (finalizedByUs).
func (c *Controller) ensureFinalizer(ctx context.Context, svc *corev1.Service) error {
	if hasFinalizer(svc) && svc.Annotations[AnnotationFinalizedBy] == c.opts.LoadBalancerClass {
		return nil
	}
	orig := svc.DeepCopy()
	controllerutil.AddFinalizer(svc, Finalizer)
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[AnnotationFinalizedBy] = c.opts.LoadBalancerClass
	// A strategic merge patch adds our finalizer to the list and our
	// annotation to the map as they are now: it cannot drop what another
	// writer added meanwhile, so it needs no resourceVersion, and a Service
	// changed since the cache saw it (a spec push) is no conflict.
	if err := c.client.Patch(ctx, svc, client.StrategicMergeFrom(orig)); err != nil {
		return fmt.Errorf("add finalizer to %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// finalizedByUs reports whether this controller put Finalizer on svc, and
// so may clear its status and remove it once the Service leaves it. Since
// AnnotationFinalizedBy names the class that did, a controller of another
// class (two zerodrop installations in one cluster) no longer strips, and
// empties the status of, the other's Services on every reconcile. A
// finalizer put on before the annotation existed is ours unless the Service
// is now the load balancer of another class (its class is immutable while it
// stays a LoadBalancer Service).
func (c *Controller) finalizedByUs(svc *corev1.Service) bool {
	if by, ok := svc.Annotations[AnnotationFinalizedBy]; ok {
		return by == c.opts.LoadBalancerClass
	}
	return svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass == nil ||
		*svc.Spec.LoadBalancerClass == c.opts.LoadBalancerClass
}

func (c *Controller) removeFinalizer(ctx context.Context, svc *corev1.Service) error {
	orig := svc.DeepCopy()
	controllerutil.RemoveFinalizer(svc, Finalizer)
	delete(svc.Annotations, AnnotationFinalizedBy)
	if err := c.client.Patch(ctx, svc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer from %s/%s: %w", svc.Namespace, svc.Name, err))
	}
	return nil
}

// updateStatuses writes ingress and conditions where they changed, emits
// Events for real changes only, and lets leaving Services go.
func (c *Controller) updateStatuses(ctx context.Context, st *state, plan model.Plan, warnings []model.Warning) error {
	changed := !plan.Empty()
	byService := map[string][]model.Warning{}
	for _, w := range warnings {
		byService[w.Service] = append(byService[w.Service], w)
	}
	for _, in := range st.active {
		svc := in.Service
		key := svc.Namespace + "/" + svc.Name
		if changed && touches(plan, key) {
			c.opts.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonEnsured, "Sync",
				"load balancer updated: %s", summarize(plan, key))
		}
		status := svc.Status.DeepCopy()
		if in.Address != "" {
			mode := c.ipMode()
			status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: in.Address, IPMode: &mode}}
		}
		ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Ensured",
			Message: "the load balancer serves this Service", ObservedGeneration: svc.Generation}
		if c.opts.Role == RoleControl {
			if why, waiting := st.unserved[svc]; waiting {
				ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonDataPlanePending, why
			} else {
				ready.Message = fmt.Sprintf("every data-plane replica that counts (%d) serves this Service", st.servedBy)
				if !meta.IsStatusConditionTrue(svc.Status.Conditions, ConditionReady) {
					c.opts.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonEnsured, "Sync", "%s", ready.Message)
				}
			}
		}
		meta.SetStatusCondition(&status.Conditions, ready)
		valid := metav1.Condition{Type: ConditionConfigValid, Status: metav1.ConditionTrue, Reason: "Valid",
			Message: "annotations and ports are valid", ObservedGeneration: svc.Generation}
		if note := in.Config.ModeNote(); note != "" {
			// Which mode a Service without the annotation got, and why.
			valid.Message += "; " + note
		}
		if ws := byService[key]; len(ws) > 0 {
			msgs := make([]string, len(ws))
			for i, w := range ws {
				msgs[i] = w.Message
			}
			valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, ws[0].Reason, strings.Join(msgs, "; ")
		}
		if err := c.patchStatus(ctx, svc, status, valid); err != nil {
			return err
		}
	}
	for svc, problem := range st.invalid {
		reason := ReasonInvalidAnnotations
		if _, ok := problem.(unrepresentable); ok {
			reason = ReasonUnrepresentable
		}
		var le *model.LimitError
		if errors.As(problem, &le) {
			reason = ReasonOverLimit
		}
		status := svc.Status.DeepCopy()
		kept := "; the load balancer keeps its last good configuration"
		if st.isHeld(svc) {
			kept = "; the listeners keep their last good configuration, the backends follow the endpoints"
		}
		valid := metav1.Condition{Type: ConditionConfigValid, Status: metav1.ConditionFalse, Reason: reason,
			Message: problem.Error() + kept, ObservedGeneration: svc.Generation}
		if err := c.patchStatus(ctx, svc, status, valid); err != nil {
			return err
		}
	}
	for _, svc := range st.leaving {
		c.alloc.release(svc.Namespace + "/" + svc.Name)
		if len(svc.Status.LoadBalancer.Ingress) > 0 || len(svc.Status.Conditions) > 0 {
			status := svc.Status.DeepCopy()
			status.LoadBalancer = corev1.LoadBalancerStatus{}
			meta.RemoveStatusCondition(&status.Conditions, ConditionReady)
			meta.RemoveStatusCondition(&status.Conditions, ConditionConfigValid)
			if err := c.writeStatus(ctx, svc, status); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		c.opts.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonDeleted, "Delete", "load balancer listeners removed")
		if err := c.removeFinalizer(ctx, svc); err != nil {
			return err
		}
	}
	return nil
}

// patchStatus sets the ConfigValid condition, emitting a Warning Event only
// when it turns False or its message changes.
func (c *Controller) patchStatus(ctx context.Context, svc *corev1.Service, status *corev1.ServiceStatus, valid metav1.Condition) error {
	valid.Message = truncate(valid.Message, maxConditionMessage)
	prev := meta.FindStatusCondition(svc.Status.Conditions, ConditionConfigValid)
	if valid.Status == metav1.ConditionFalse && (prev == nil || prev.Status != valid.Status || prev.Message != valid.Message) {
		c.opts.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, valid.Reason, "Validate", "%s", valid.Message)
	}
	meta.SetStatusCondition(&status.Conditions, valid)
	return c.writeStatus(ctx, svc, status)
}

func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, status *corev1.ServiceStatus) error {
	if equality.Semantic.DeepEqual(&svc.Status, status) {
		return nil
	}
	// The Service is the cache's: the patch carries its resourceVersion, since
	// a merge patch replaces whole lists (conditions, ingress) and would drop
	// what another writer added since. A conflict makes the reconcile retry.
	orig := svc.DeepCopy()
	svc.Status = *status
	if err := c.client.Status().Patch(ctx, svc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("update status of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// touches reports whether the plan changes a listener of the Service.
func touches(p model.Plan, svcKey string) bool {
	if p.Create {
		return true
	}
	for _, op := range p.Ops {
		if strings.HasPrefix(op.Listener, svcKey+"/") {
			return true
		}
	}
	return false
}

func summarize(p model.Plan, svcKey string) string {
	counts := map[model.OpKind]int{}
	for _, op := range p.Ops {
		if strings.HasPrefix(op.Listener, svcKey+"/") {
			counts[op.Kind]++
		}
	}
	parts := make([]string, 0, len(counts))
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// recordFailure counts consecutive failures of one load balancer; only a
// persistent failure becomes a Warning Event (conflicts and throttling retry
// silently).
func (c *Controller) recordFailure(ctx context.Context, key string, err error) {
	c.mu.Lock()
	c.failures[key]++
	n := c.failures[key]
	c.mu.Unlock()
	if n%c.opts.FailureEventThreshold != 0 {
		return
	}
	st, cerr := c.collect(ctx, key)
	if cerr != nil {
		return
	}
	for _, in := range st.active {
		c.opts.Recorder.Eventf(in.Service, nil, corev1.EventTypeWarning, ReasonSyncFailed, "Sync",
			"load balancer sync failed %d times in a row: %v", n, err)
		if c.opts.Role == RoleDataPlane {
			continue // the control role writes the Services
		}
		status := in.Service.Status.DeepCopy()
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse,
			Reason: ReasonSyncFailed, Message: truncate(err.Error(), 1000), ObservedGeneration: in.Service.Generation})
		_ = c.writeStatus(ctx, in.Service, status)
	}
}

func (c *Controller) clearFailures(ctx context.Context, key string) {
	c.mu.Lock()
	delete(c.failures, key)
	c.mu.Unlock()
}
