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

// again is when a reconcile asks for its load balancer's next look, other
// than on a change. Ordered by how soon: of two, max is the sooner.
type again int

const (
	// againOnChange: nothing is under way.
	againOnChange again = iota
	// againWaiting (RoleControl): a Service waits for the data-plane
	// replicas; the looks back off (replicaWaits).
	againWaiting
	// againPoll: after DrainPollInterval — a drain or a step in progress,
	// which ends by itself soon.
	againPoll
)

// reconcileKey reconciles one load balancer; a positive duration asks for
// another look then (a drain in progress, or waiting for the data-plane
// replicas).
func (c *Controller) reconcileKey(ctx context.Context, key string) (time.Duration, error) {
	start := time.Now()
	log := c.opts.Logger.WithValues("loadBalancer", key)
	ctx = withLogger(ctx, log)
	result, next, err := c.reconcile(ctx, key)
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
	var wait time.Duration
	switch next {
	case againWaiting:
		wait = c.waits.waiting(key)
	case againPoll:
		c.waits.done(key)
		wait = c.opts.DrainPollInterval
	default:
		c.waits.done(key)
	}
	log.V(2).Info("reconciled", "result", result, "duration", time.Since(start), "again", wait)
	return wait, nil
}

// reconcile reconciles key in this process's role, which decides the writes
// (Role): each role's reconcile is one sequence of steps (steps.go), so what
// a role writes, and in which order, reads in one function.
func (c *Controller) reconcile(ctx context.Context, key string) (string, again, error) {
	var (
		result  string
		pending bool
		err     error
	)
	switch c.opts.Role {
	case RoleControl:
		return c.reconcileControl(ctx, key)
	case RoleDataPlane:
		result, pending, err = c.reconcileDataPlane(ctx, key)
	default:
		result, pending, err = c.reconcileAll(ctx, key)
	}
	if pending {
		return result, againPoll, err
	}
	return result, againOnChange, err
}

// reconcileAll is RoleAll's reconcile: one process writes the load balancer
// and its Services (finalizers, status, Events).
func (c *Controller) reconcileAll(ctx context.Context, key string) (string, bool, error) {
	p, err := c.observeKey(ctx, key)
	if err != nil {
		return resultError, false, err
	}
	c.frontendAddresses(p)
	// Addresses are settled before the finalizers: both are apiserver writes.
	if err := c.ensureFinalizers(ctx, p.st.active); err != nil {
		return resultError, false, err
	}
	if err := c.desire(ctx, p); err != nil {
		return resultError, false, err
	}
	if err := c.planStep(ctx, p); err != nil {
		return resultError, false, err
	}
	result, err := c.write(ctx, p)
	if err != nil {
		return result, false, err
	}
	if err := c.assignedAddresses(ctx, p, result); err != nil {
		return result, false, err
	}
	// Written (or nothing to write): what key's Services free or take of
	// the check budget counts for the others from now.
	c.commitChecks(key)
	if err := c.updateStatuses(ctx, p.st, p.plan, p.warnings); err != nil {
		if apierrors.IsConflict(err) {
			// A Service changed since the cache showed it: retried silently.
			return resultConflict, false, err
		}
		return result, false, err
	}
	c.countBackends(key, p.desired)
	c.countWritten(key, p.desired)
	return result, p.pending, nil
}

// reconcileDataPlane is RoleDataPlane's reconcile: a replica writes only its
// own load balancer, at the addresses the control role wrote to the Services'
// status, and no Service (the control role adds the finalizers and writes the
// status and Events), so why it does not serve a Service as asked is only
// logged.
func (c *Controller) reconcileDataPlane(ctx context.Context, key string) (string, bool, error) {
	p, err := c.observeKey(ctx, key)
	if err != nil {
		return resultError, false, err
	}
	c.frontendAddresses(p)
	if err := c.desire(ctx, p); err != nil {
		return resultError, false, err
	}
	if err := c.planStep(ctx, p); err != nil {
		return resultError, false, err
	}
	result, err := c.write(ctx, p)
	if err != nil {
		return result, false, err
	}
	// Written (or nothing to write): what key's Services free or take of
	// the check budget counts for the others from now.
	c.commitChecks(key)
	for svc, err := range p.st.invalid {
		logFrom(ctx).V(1).Info("Service not served as asked; its listeners stay as they are", "service", svc.Namespace+"/"+svc.Name, "reason", err.Error())
	}
	c.countBackends(key, p.desired)
	c.countWritten(key, p.desired)
	return result, p.pending, nil
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
		cfg, err := model.ParseServiceConfig(svc.Annotations, c.defaultMode)
		// Settled on the Service alone here; observeKey settles it again
		// on the load balancer it reads (settleModes).
		cfg = cfg.Settle(svc, nil)
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
			// node without a local endpoint drains (model.Desired), unless
			// the provider leaves it to the probe (provider.ProbeDecider).
			// A default mode may yet settle to IP mode (settleModes).
			local := ins[i].Service.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
			if ins[i].Config.Mode != model.IPMode && !local && !ins[i].Config.ModeDefault {
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
	return c.listNodes(ctx)
}

// listNodes lists the nodes from the cache. A failed list is an error,
// never an empty list.
func (c *Controller) listNodes(ctx context.Context) ([]*corev1.Node, error) {
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
