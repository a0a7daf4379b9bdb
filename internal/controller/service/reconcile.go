package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Reconcile results, as counted in zerodrop_reconcile_total.
const (
	resultNoop     = "noop"
	resultApplied  = "applied"
	resultDeleted  = "deleted"
	resultConflict = "conflict"
	resultError    = "error"
)

// state is everything one reconcile learned from the caches.
type state struct {
	key string
	// active Services get a load balancer.
	active []model.ServiceInput
	// invalid Services keep their listeners' settings as observed (invariant 7).
	invalid map[*corev1.Service]error
	// held are the invalid Services whose backends still follow their
	// endpoints (or nodes), with the valid part of their configuration: a bad
	// annotation must not stall a rollout or keep deleted pods. An invalid
	// backend mode leaves nothing to follow: such a Service is not held and its
	// backends stay as they are too.
	held []model.ServiceInput
	// leaving Services are deleted or no longer zerodrop's; their listeners go.
	leaving []*corev1.Service
	// RoleControl only: unserved are the active Services some data-plane
	// replica does not serve yet (why), servedBy how many replicas count.
	unserved map[*corev1.Service]string
	servedBy int
}

// reconcileKey reconciles one load balancer; a positive duration asks for
// another look then (a drain in progress).
func (c *Controller) reconcileKey(ctx context.Context, key string) (time.Duration, error) {
	start := time.Now()
	log := c.opts.Logger.WithValues("loadBalancer", key)
	ctx = withLogger(ctx, log)
	result, pending, err := c.reconcile(ctx, key)
	c.opts.Metrics.Reconciles.WithLabelValues(result).Inc()
	c.opts.Metrics.ReconcileLatency.WithLabelValues(result).Observe(time.Since(start).Seconds())
	if err != nil {
		c.recordFailure(ctx, key, err)
		switch {
		case result == resultConflict:
			log.V(2).Info("load balancer changed under us; re-planning", "err", err)
		case apierrors.IsConflict(err):
			// A Service or its status changed under us: the requeue reads
			// it again (persistent conflicts still make the Warning Event).
			log.V(2).Info("Service changed under us; reconciling again", "err", err)
		default:
			log.Error(err, "reconcile failed")
		}
		return 0, err
	}
	c.clearFailures(ctx, key)
	log.V(2).Info("reconciled", "result", result, "duration", time.Since(start), "pending", pending)
	if pending {
		return c.opts.DrainPollInterval, nil
	}
	return 0, nil
}

func (c *Controller) reconcile(ctx context.Context, key string) (string, bool, error) {
	if c.opts.Role == RoleControl {
		return c.reconcileControl(ctx, key)
	}
	st, err := c.collect(ctx, key)
	if err != nil {
		return resultError, false, err
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return resultError, false, err
	}
	pname := c.opts.Provider.Name()
	observed, err := c.opts.Provider.Observe(ctx, key)
	if err != nil {
		c.opts.Metrics.ProviderErrors.WithLabelValues(pname, "observe").Inc()
		return resultError, false, fmt.Errorf("observe %s: %w", key, err)
	}

	// Addresses are settled before the finalizers: both are apiserver writes.
	for i := range st.active {
		in := &st.active[i]
		addr, err := c.address(in.Service, in.Config, observed)
		if err != nil {
			st.invalid[in.Service] = err
			st.held = append(st.held, *in)
			continue
		}
		in.Address = addr
	}
	st.active = dropInvalid(st.active, st.invalid)
	for _, in := range st.active {
		if c.opts.Role == RoleDataPlane {
			break // the control role adds it
		}
		if err := c.ensureFinalizer(ctx, in.Service); err != nil {
			return resultError, false, err
		}
	}

	nodes, err := c.nodes(ctx, append(st.active[:len(st.active):len(st.active)], st.held...))
	if err != nil {
		return resultError, false, err
	}
	dopts := c.desiredOptions(ctx, nodes)
	desired, warnings := model.Desired(key, st.active, dopts)
	// Only the backends of held Services' listeners are taken from here
	// (keepInvalid); their warnings are not reported, ConfigValid is False.
	held, _ := model.Desired(key, st.held, dopts)
	// Before keepInvalid: only the active Services' checks are stretched,
	// the held ones' listeners stay as they are.
	warnings = append(warnings, c.fitChecks(key, st, desired, held)...)
	c.countOver(key, st)
	desired = keepInvalid(desired, observed, st.invalid, held)
	if len(st.active) == 0 && len(st.invalid) == 0 {
		desired = nil
	}

	if !c.alloc.enabled() {
		keepAssignedAddresses(desired, observed)
	}
	pending := false
	if !c.opts.ImmediateRemoval {
		if desired, pending, err = c.step(ctx, key, st, observed, desired); err != nil {
			return resultError, false, err
		}
	}
	desired = c.rejectUnrepresentable(key, st, observed, desired)
	var plan model.Plan
	if c.opts.Sync == SyncFull {
		plan = model.FullPlan(observed, desired)
	} else {
		plan = model.Diff(observed, desired)
	}

	result := resultNoop
	if !plan.Empty() {
		if err := c.apply(ctx, key, desired, plan); err != nil {
			if errors.Is(err, provider.ErrConflict) {
				c.opts.Metrics.ProviderConflicts.WithLabelValues(pname).Inc()
				return resultConflict, false, err
			}
			c.opts.Metrics.ProviderErrors.WithLabelValues(pname, "apply").Inc()
			return resultError, false, fmt.Errorf("apply plan to %s: %w", key, err)
		}
		result = resultApplied
		if desired == nil {
			result = resultDeleted
			c.alloc.release(key) // what was held for a swept orphan
		}
		for kind, n := range plan.Counts() {
			c.opts.Metrics.PlanOps.WithLabelValues(string(kind)).Add(float64(n))
		}
		if !c.alloc.enabled() && desired != nil && c.opts.Role != RoleDataPlane {
			// The provider assigns frontend addresses (a cloud): read what it
			// gave, for the Services' status.
			if observed, err = c.opts.Provider.Observe(ctx, key); err != nil {
				return result, false, fmt.Errorf("observe %s after apply: %w", key, err)
			}
		}
	}
	// Written (or nothing to write): what key's Services free or take of
	// the check budget counts for the others from now.
	c.commitChecks(key)
	if !c.alloc.enabled() {
		providerAddresses(st.active, observed)
	}
	if c.opts.Role == RoleDataPlane {
		// The control role writes the Services.
		for svc, err := range st.invalid {
			logFrom(ctx).V(1).Info("Service not served as asked; its listeners stay as they are", "service", svc.Namespace+"/"+svc.Name, "reason", err.Error())
		}
		c.countBackends(key, desired)
		c.countWritten(key, desired)
		return result, pending, nil
	}
	if err := c.updateStatuses(ctx, st, plan, warnings); err != nil {
		if apierrors.IsConflict(err) {
			// A Service changed since the cache showed it: retried silently.
			return resultConflict, false, err
		}
		return result, false, err
	}
	c.countBackends(key, desired)
	c.countWritten(key, desired)
	return result, pending, nil
}

func (c *Controller) apply(ctx context.Context, key string, desired *model.LoadBalancer, plan model.Plan) error {
	logFrom(ctx).Info("applying plan", "ops", len(plan.Ops), "create", plan.Create, "plan", plan.String())
	if desired == nil {
		return c.opts.Provider.Delete(ctx, key)
	}
	return c.opts.Provider.Apply(ctx, plan)
}

// keepAssignedAddresses: where the provider assigns frontend addresses the
// desired listener has none; the one the provider gave is not a difference.
func keepAssignedAddresses(desired, observed *model.LoadBalancer) {
	if desired == nil {
		return
	}
	for i := range desired.Listeners {
		l := &desired.Listeners[i]
		if o := observed.Listener(l.Name); o != nil && l.Address == "" {
			l.Address = o.Address
		}
	}
}

// providerAddresses fills in the addresses a provider assigned, from the
// Services' listeners as observed.
func providerAddresses(active []model.ServiceInput, observed *model.LoadBalancer) {
	if observed == nil {
		return
	}
	for i := range active {
		svc := active[i].Service
		prefix := svc.Namespace + "/" + svc.Name + "/"
		for _, l := range observed.Listeners {
			if strings.HasPrefix(l.Name, prefix) && l.Address != "" {
				active[i].Address = l.Address
				break
			}
		}
	}
}

// collect reads the Services of one load balancer from the cache and sorts
// them into active, invalid and leaving.
func (c *Controller) collect(ctx context.Context, key string) (*state, error) {
	var list corev1.ServiceList
	if err := c.cache.List(ctx, &list, client.MatchingFields{serviceKeyIndex: key}); err != nil {
		return nil, fmt.Errorf("list services of %s: %w", key, err)
	}
	st := &state{key: key, invalid: map[*corev1.Service]error{}}
	for i := range list.Items {
		svc := list.Items[i].DeepCopy()
		if !c.managed(svc) || svc.DeletionTimestamp != nil {
			if hasFinalizer(svc) && c.finalizedByUs(svc) {
				st.leaving = append(st.leaving, svc)
			}
			continue
		}
		cfg, err := model.ParseServiceConfig(svc.Annotations)
		if err == nil && c.opts.ValidateService != nil {
			err = c.opts.ValidateService(svc)
		}
		if err == nil {
			err = c.checkLimits(svc)
		}
		if err != nil {
			st.invalid[svc] = err
			var inv *model.InvalidConfigError
			if !errors.As(err, &inv) || !inv.Invalid(model.AnnotationBackendMode) {
				st.held = append(st.held, model.ServiceInput{Service: svc, Config: cfg})
			}
			continue
		}
		st.active = append(st.active, model.ServiceInput{Service: svc, Config: cfg})
	}
	for _, ins := range [][]model.ServiceInput{st.active, st.held} {
		for i := range ins {
			// Node mode reads them only for externalTrafficPolicy Local: a
			// node without a local endpoint drains (model.Desired).
			local := ins[i].Service.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
			if ins[i].Config.Mode != model.IPMode && !local {
				continue
			}
			slices, err := c.slices(ctx, ins[i].Service)
			if err != nil {
				return nil, err
			}
			ins[i].Slices = slices
		}
	}
	return st, nil
}

// isHeld reports whether an invalid Service's backends follow its endpoints.
func (st *state) isHeld(svc *corev1.Service) bool {
	for _, in := range st.held {
		if in.Service == svc {
			return true
		}
	}
	return false
}

func dropInvalid(in []model.ServiceInput, invalid map[*corev1.Service]error) []model.ServiceInput {
	out := in[:0]
	for _, s := range in {
		if _, bad := invalid[s.Service]; !bad {
			out = append(out, s)
		}
	}
	return out
}

// keepInvalid carries the observed listeners of invalid Services into the
// desired state, so that a typo in an annotation changes none of their
// settings (invariant 7). Their backends are those of held (the Services'
// endpoints or nodes) where held has the listener, else as observed.
func keepInvalid(desired, observed *model.LoadBalancer, invalid map[*corev1.Service]error, held *model.LoadBalancer) *model.LoadBalancer {
	if len(invalid) == 0 || observed == nil {
		return desired
	}
	prefixes := sets.New[string]()
	for svc := range invalid {
		prefixes.Insert(svc.Namespace + "/" + svc.Name + "/")
	}
	out := *desired
	out.Listeners = append([]model.Listener(nil), desired.Listeners...)
	for _, l := range observed.Listeners {
		for p := range prefixes {
			if !strings.HasPrefix(l.Name, p) {
				continue
			}
			if h := held.Listener(l.Name); h != nil {
				l.Backends = h.Backends
			}
			out.Listeners = append(out.Listeners, l)
		}
	}
	return model.Canonical(&out)
}

// nodes lists the nodes when a Service uses node mode. A failed list is an
// error, never an empty list: that would empty the pools.
func (c *Controller) nodes(ctx context.Context, active []model.ServiceInput) ([]*corev1.Node, error) {
	need := false
	for _, in := range active {
		need = need || in.Config.Mode == model.NodeMode
	}
	if !need {
		return nil, nil
	}
	var list corev1.NodeList
	if err := c.cache.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
