// Package memory is an in-memory recording provider for fast controller
// tests. It keeps load balancers as model values, versions them like ETags and
// records every write; integration tests use the real HAProxy provider.
package memory

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.Provider = (*Provider)(nil)

// Provider is an in-memory load balancer store. The zero value is not usable;
// call New.
type Provider struct {
	hooks provider.Hooks

	mu      sync.Mutex
	lbs     map[string]*model.LoadBalancer
	version int
	// Writes lists every applied op (and "delete <key>"), in order.
	writes []string
	// conns holds connection counts set by tests, by listener|address:port.
	conns map[string]int64
	// unhealthy marks backends Backends reports as failing their checks.
	unhealthy map[string]bool
	// BeforeApply, when set, runs inside Apply before the version check
	// (tests use it to change state behind the controller's back).
	BeforeApply func(key string)
}

// New returns an empty provider.
func New(hooks provider.Hooks) *Provider {
	return &Provider{hooks: hooks, lbs: map[string]*model.LoadBalancer{}, conns: map[string]int64{}, unhealthy: map[string]bool{}}
}

// SetHooks replaces the hooks (a test's new controller brings new metrics).
func (p *Provider) SetHooks(h provider.Hooks) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks = h
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "memory" }

// Unsupported implements provider.Provider: like HAProxy, no UDP.
func (p *Provider) Unsupported() map[model.Protocol]bool {
	return map[model.Protocol]bool{model.UDP: true, model.SCTP: true}
}

// Observe implements provider.Provider.
func (p *Provider) Observe(_ context.Context, key string) (*model.LoadBalancer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks.OnRead("get")
	lb := p.lbs[key]
	if lb == nil {
		return nil, nil
	}
	return model.Canonical(lb), nil
}

// Apply implements provider.Provider.
func (p *Provider) Apply(_ context.Context, plan model.Plan) error {
	if p.BeforeApply != nil {
		p.BeforeApply(plan.Key)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.lbs[plan.Key]
	if cur != nil && cur.Version != plan.Version || cur == nil && !plan.Create {
		return fmt.Errorf("apply to %s: %w", plan.Key, provider.ErrConflict)
	}
	next, err := model.Apply(cur, plan)
	if err != nil {
		return err
	}
	for _, op := range plan.Ops {
		p.writes = append(p.writes, op.String())
		p.hooks.OnWrite(string(op.Kind))
	}
	if len(plan.Ops) == 0 && plan.Create {
		p.hooks.OnWrite("create")
	}
	// Every Apply call that passes the version check makes a new version,
	// even an empty plan: a real provider's PUT changes the ETag whatever it
	// carries, so tests can tell an empty write from none.
	p.version++
	next.Version = strconv.Itoa(p.version)
	p.lbs[plan.Key] = next
	return nil
}

// Version returns the load balancer's current version ("" when it does not
// exist) without counting a read.
func (p *Provider) Version(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lb := p.lbs[key]; lb != nil {
		return lb.Version
	}
	return ""
}

// Delete implements provider.Provider.
func (p *Provider) Delete(_ context.Context, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.lbs[key]; !ok {
		return nil
	}
	delete(p.lbs, key)
	p.writes = append(p.writes, "delete "+key)
	p.hooks.OnWrite("delete")
	return nil
}

// Backends implements provider.Provider: every backend is healthy, with the
// connections SetConnections gave it (0 by default).
func (p *Provider) Backends(_ context.Context, key string) ([]provider.BackendStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.BackendStatus
	if lb := p.lbs[key]; lb != nil {
		for _, l := range lb.Listeners {
			for _, b := range l.Backends {
				out = append(out, provider.BackendStatus{Listener: l.Name, Address: b.Address, Port: b.Port,
					State: b.State, Healthy: !p.unhealthy[l.Name+"|"+b.ID()], HealthKnown: true,
					Connections: p.conns[l.Name+"|"+b.ID()]})
			}
		}
	}
	return out, nil
}

// SetConnections sets the connection count Backends reports for a backend.
func (p *Provider) SetConnections(listener, backendID string, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[listener+"|"+backendID] = n
}

// SetHealthy sets the health Backends reports for a backend (default healthy).
func (p *Provider) SetHealthy(listener, backendID string, healthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhealthy[listener+"|"+backendID] = !healthy
}

// Set replaces a load balancer behind the controller's back (a second writer).
func (p *Provider) Set(lb *model.LoadBalancer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	c := model.Canonical(lb)
	c.Version = strconv.Itoa(p.version)
	p.lbs[lb.Key] = c
}

// Writes returns the ops written so far.
func (p *Provider) Writes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.writes...)
}
