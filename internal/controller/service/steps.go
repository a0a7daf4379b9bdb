package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The steps of a reconcile that writes a load balancer (reconcileAll,
// reconcileDataPlane), in the order they run. A step does not branch on the
// role: which steps run is the role's reconcile's choice. (Two helpers they
// call still answer per role: address, the data plane's from the Service's
// status, and desiredOptions.)

// pass is one reconcile of a load balancer this process writes, as its steps
// hand it on: what the caches and the provider showed, what is wanted, and
// this step's plan.
type pass struct {
	st       *state
	observed *model.LoadBalancer
	// desired is what the load balancer should be (desire), then this
	// step's part of it (planStep); nil deletes it.
	desired  *model.LoadBalancer
	warnings []model.Warning
	plan     model.Plan
	// pending: more steps are to come (a drain in progress).
	pending bool
	// staying are the backend addresses of nodes marked leaving that still
	// stand (model.StayingNodes): their drain waits for their connections,
	// not for a drain timeout.
	staying map[string]bool
}

// observeKey reads key's Services from the caches and its load balancer from
// the provider, rate-limited like every provider call: a plan starts from
// both.
func (c *Controller) observeKey(ctx context.Context, key string) (*pass, error) {
	st, err := c.collect(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	observed, err := c.opts.Provider.Observe(ctx, key)
	if err != nil {
		c.opts.Metrics.ProviderErrors.WithLabelValues(c.opts.Provider.Name(), "observe").Inc()
		return nil, fmt.Errorf("observe %s: %w", key, err)
	}
	if err := c.settleModes(ctx, st, observed); err != nil {
		return nil, err
	}
	return &pass{st: st, observed: observed}, nil
}

// frontendAddresses gives each active Service its frontend address (address:
// the data plane's from the Service's status). A Service without one becomes
// invalid and held: its listeners stay as observed and their backends follow
// its endpoints, as with a bad annotation.
func (c *Controller) frontendAddresses(p *pass) {
	st := p.st
	for i := range st.active {
		in := &st.active[i]
		addr, err := c.address(in.Service, in.Config, p.observed)
		if err != nil {
			st.invalid[in.Service] = err
			st.held = append(st.held, *in)
			continue
		}
		in.Address = addr
	}
	st.active = dropInvalid(st.active, st.invalid)
}

// ensureFinalizers adds the finalizer to every active Service before the
// provider creates anything for it, so that a deleted Service's listeners go
// before it does. Only a role that writes the Services runs it.
func (c *Controller) ensureFinalizers(ctx context.Context, active []model.ServiceInput) error {
	for _, in := range active {
		if err := c.ensureFinalizer(ctx, in.Service); err != nil {
			return err
		}
	}
	return nil
}

// desire builds what key's load balancer should be: the active Services'
// listeners with their check intervals fitted to the budget, the invalid
// Services' listeners as observed with the held ones' backends (invariant
// 7), nil when no Service wants it. The warnings are the active Services'.
func (c *Controller) desire(ctx context.Context, p *pass) error {
	st := p.st
	nodes, err := c.nodes(ctx, append(st.active[:len(st.active):len(st.active)], st.held...))
	if err != nil {
		return err
	}
	dopts := c.desiredOptions(ctx, nodes)
	p.staying = model.StayingNodes(nodes, dopts.AddressMap)
	desired, warnings := model.Desired(st.key, st.active, dopts)
	// Only the backends of held Services' listeners are taken from here
	// (keepInvalid); their warnings are not reported, ConfigValid is False.
	held, _ := model.Desired(st.key, st.held, dopts)
	// Before keepInvalid: only the active Services' checks are stretched,
	// the held ones' listeners stay as they are.
	warnings = append(warnings, c.fitChecks(st.key, st, desired, held)...)
	c.countOver(st.key, st)
	desired = keepInvalid(desired, p.observed, st.invalid, held)
	if len(st.active) == 0 && len(st.invalid) == 0 {
		desired = nil
	}
	if !c.alloc.enabled() {
		keepAssignedAddresses(desired, p.observed)
	}
	p.desired, p.warnings = desired, warnings
	return nil
}

// planStep narrows desired to the next safe step (step: drains first, unless
// ImmediateRemoval), keeps the listeners of Services the provider cannot
// represent as observed, and plans the writes from observed to it: the
// minimal diff, or every listener again with --sync=full.
func (c *Controller) planStep(ctx context.Context, p *pass) error {
	st := p.st
	if !c.opts.ImmediateRemoval {
		desired, pending, err := c.step(ctx, st.key, st, p.observed, p.desired, p.staying)
		if err != nil {
			return err
		}
		p.desired, p.pending = desired, pending
	}
	p.desired = c.rejectUnrepresentable(st.key, st, p.observed, p.desired)
	if c.opts.Sync == SyncFull {
		p.plan = model.FullPlan(p.observed, p.desired)
	} else {
		p.plan = model.Diff(p.observed, p.desired)
	}
	return nil
}

// write applies the plan, if it has anything, and counts it: the result is
// noop, applied, deleted (with what the allocator held for the load balancer,
// as for a swept orphan), or conflict (the provider's load balancer changed
// under us: the requeue re-plans, silently).
func (c *Controller) write(ctx context.Context, p *pass) (string, error) {
	if p.plan.Empty() {
		return resultNoop, nil
	}
	key, pname := p.st.key, c.opts.Provider.Name()
	if err := c.apply(ctx, key, p.desired, p.plan); err != nil {
		if errors.Is(err, provider.ErrConflict) {
			c.opts.Metrics.ProviderConflicts.WithLabelValues(pname).Inc()
			return resultConflict, err
		}
		c.opts.Metrics.ProviderErrors.WithLabelValues(pname, "apply").Inc()
		return resultError, fmt.Errorf("apply plan to %s: %w", key, err)
	}
	result := resultApplied
	if p.desired == nil {
		result = resultDeleted
		c.alloc.release(key) // what was held for a swept orphan
	}
	for kind, n := range p.plan.Counts() {
		c.opts.Metrics.PlanOps.WithLabelValues(string(kind)).Add(float64(n))
	}
	return result, nil
}

// apply writes the plan, or deletes the load balancer when nothing wants it,
// with a log line: every write to a provider is in the log.
func (c *Controller) apply(ctx context.Context, key string, desired *model.LoadBalancer, plan model.Plan) error {
	logFrom(ctx).Info("applying plan", "ops", len(plan.Ops), "create", plan.Create, "plan", plan.String())
	if desired == nil {
		return c.opts.Provider.Delete(ctx, key)
	}
	return c.opts.Provider.Apply(ctx, plan)
}

// assignedAddresses: where the provider assigns frontend addresses (a cloud,
// no address pool), the Services' status shows the ones it gave, read again
// after a write that created or changed listeners. Only a role that writes
// the Services runs it.
func (c *Controller) assignedAddresses(ctx context.Context, p *pass, result string) error {
	if c.alloc.enabled() {
		return nil
	}
	if result == resultApplied {
		observed, err := c.opts.Provider.Observe(ctx, p.st.key)
		if err != nil {
			return fmt.Errorf("observe %s after apply: %w", p.st.key, err)
		}
		p.observed = observed
	}
	providerAddresses(p.st.active, p.observed)
	return nil
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
