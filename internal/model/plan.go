package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// OpKind names one provider operation.
type OpKind string

// The operations a plan is made of, from the cheapest (a runtime change of one
// backend) to the most expensive (a frontend change, which may need a reload).
const (
	OpCreateListener OpKind = "create-listener"
	OpUpdateListener OpKind = "update-listener"
	OpDeleteListener OpKind = "delete-listener"
	OpAddBackend     OpKind = "add-backend"
	OpUpdateBackend  OpKind = "update-backend"
	OpRemoveBackend  OpKind = "remove-backend"
)

// Op is one change to one load balancer.
type Op struct {
	Kind OpKind `json:"kind"`
	// Listener names the listener the op is about.
	Listener string `json:"listener"`
	// Spec is the full listener for create (backends included) and the new
	// frontend for update (backends ignored).
	Spec *Listener `json:"spec,omitempty"`
	// Backend is the backend for the backend ops.
	Backend *Backend `json:"backend,omitempty"`
}

func (o Op) String() string {
	switch {
	case o.Backend != nil:
		return fmt.Sprintf("%s %s %s", o.Kind, o.Listener, o.Backend.ID())
	default:
		return fmt.Sprintf("%s %s", o.Kind, o.Listener)
	}
}

// Plan is the list of operations that turns the observed load balancer into
// the desired one.
type Plan struct {
	Key string `json:"key"`
	// Version is the version the plan was computed against; a provider refuses
	// the plan (ErrConflict) when the load balancer has changed since.
	Version string `json:"version,omitempty"`
	// Create is set when the load balancer does not exist yet.
	Create bool `json:"create,omitempty"`
	Ops    []Op `json:"ops,omitempty"`
}

// Empty reports whether the plan writes nothing.
func (p Plan) Empty() bool { return !p.Create && len(p.Ops) == 0 }

func (p Plan) String() string {
	parts := make([]string, 0, len(p.Ops))
	for _, op := range p.Ops {
		parts = append(parts, op.String())
	}
	return strings.Join(parts, "; ")
}

// Counts returns how many ops of each kind the plan has.
func (p Plan) Counts() map[OpKind]int {
	m := map[OpKind]int{}
	for _, op := range p.Ops {
		m[op.Kind]++
	}
	return m
}

// Canonical returns a deep copy with listeners and backends in canonical order
// and defaults filled in, so that equal load balancers compare equal however a
// provider listed them.
func Canonical(lb *LoadBalancer) *LoadBalancer {
	if lb == nil {
		return nil
	}
	out := &LoadBalancer{Key: lb.Key, Version: lb.Version}
	if len(lb.Listeners) > 0 {
		out.Listeners = make([]Listener, len(lb.Listeners))
	}
	for i, l := range lb.Listeners {
		out.Listeners[i] = canonicalListener(l)
	}
	sort.SliceStable(out.Listeners, func(i, j int) bool { return out.Listeners[i].Name < out.Listeners[j].Name })
	// Names are identities: of duplicates only the first counts.
	out.Listeners = slices.CompactFunc(out.Listeners, func(a, b Listener) bool { return a.Name == b.Name })
	return out
}

func canonicalListener(l Listener) Listener {
	out := l
	out.Backends = nil
	if len(l.Backends) > 0 {
		out.Backends = make([]Backend, len(l.Backends))
		for i, b := range l.Backends {
			out.Backends[i] = canonicalBackend(b)
		}
		sort.SliceStable(out.Backends, func(i, j int) bool { return backendLess(out.Backends[i], out.Backends[j]) })
		out.Backends = slices.CompactFunc(out.Backends, func(a, b Backend) bool { return a.ID() == b.ID() })
	}
	return out
}

func canonicalBackend(b Backend) Backend {
	if b.State == "" {
		b.State = Active
	}
	if b.State == Draining {
		// A draining backend takes no new connections whatever its weight says,
		// and providers report it as weight 0.
		b.Weight = 0
	} else if b.Weight == 0 {
		b.Weight = DefaultWeight
	}
	return b
}

func backendLess(a, b Backend) bool {
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	return a.Port < b.Port
}

// Diff returns the minimal plan that turns observed into desired. A nil
// observed means the load balancer does not exist; a nil desired means it
// should not. Diff(x, x) is always empty: this is what makes a restart with
// nothing changed write nothing.
func Diff(observed, desired *LoadBalancer) Plan {
	obs, des := Canonical(observed), Canonical(desired)
	plan := Plan{}
	switch {
	case des != nil:
		plan.Key = des.Key
	case obs != nil:
		plan.Key = obs.Key
	}
	if obs != nil {
		plan.Version = obs.Version
	}
	if obs == nil && des != nil {
		plan.Create = true
		obs = &LoadBalancer{Key: des.Key}
	}
	if des == nil {
		des = &LoadBalancer{}
	}
	if obs == nil {
		return plan
	}
	o, d := 0, 0
	for o < len(obs.Listeners) || d < len(des.Listeners) {
		switch {
		case d == len(des.Listeners) || (o < len(obs.Listeners) && obs.Listeners[o].Name < des.Listeners[d].Name):
			plan.Ops = append(plan.Ops, Op{Kind: OpDeleteListener, Listener: obs.Listeners[o].Name})
			o++
		case o == len(obs.Listeners) || des.Listeners[d].Name < obs.Listeners[o].Name:
			spec := des.Listeners[d]
			plan.Ops = append(plan.Ops, Op{Kind: OpCreateListener, Listener: spec.Name, Spec: &spec})
			d++
		default:
			plan.Ops = append(plan.Ops, diffListener(obs.Listeners[o], des.Listeners[d])...)
			o++
			d++
		}
	}
	return plan
}

func diffListener(obs, des Listener) []Op {
	var ops []Op
	if !obs.SameFrontend(des) {
		spec := des
		spec.Backends = nil
		ops = append(ops, Op{Kind: OpUpdateListener, Listener: des.Name, Spec: &spec})
	}
	o, d := 0, 0
	for o < len(obs.Backends) || d < len(des.Backends) {
		switch {
		case d == len(des.Backends) || (o < len(obs.Backends) && backendLess(obs.Backends[o], des.Backends[d])):
			b := obs.Backends[o]
			ops = append(ops, Op{Kind: OpRemoveBackend, Listener: des.Name, Backend: &b})
			o++
		case o == len(obs.Backends) || backendLess(des.Backends[d], obs.Backends[o]):
			b := des.Backends[d]
			ops = append(ops, Op{Kind: OpAddBackend, Listener: des.Name, Backend: &b})
			d++
		default:
			if obs.Backends[o] != des.Backends[d] {
				b := des.Backends[d]
				ops = append(ops, Op{Kind: OpUpdateBackend, Listener: des.Name, Backend: &b})
			}
			o++
			d++
		}
	}
	return ops
}

// FullPlan is the upstream-like plan (--sync=full): every listener and every
// backend of desired is written again whether or not it changed, the way the
// upstream service controller calls EnsureLoadBalancer for every Service on
// start and on each resync. Deletions are still computed by Diff.
func FullPlan(observed, desired *LoadBalancer) Plan {
	plan := Diff(observed, desired)
	if plan.Create || desired == nil {
		return plan
	}
	written := map[string]bool{}
	for _, op := range plan.Ops {
		if op.Kind == OpUpdateListener || op.Kind == OpCreateListener {
			written[op.Listener] = true
		}
		if op.Backend != nil {
			written[op.Listener+"|"+op.Backend.ID()] = true
		}
	}
	des := Canonical(desired)
	for _, l := range des.Listeners {
		if !written[l.Name] {
			spec := l
			spec.Backends = nil
			plan.Ops = append(plan.Ops, Op{Kind: OpUpdateListener, Listener: l.Name, Spec: &spec})
		}
		for _, b := range l.Backends {
			if !written[l.Name+"|"+b.ID()] {
				b := b
				plan.Ops = append(plan.Ops, Op{Kind: OpUpdateBackend, Listener: l.Name, Backend: &b})
			}
		}
	}
	return plan
}

// Apply returns the load balancer that results from executing plan on
// observed. Providers execute plans for real; Apply states what that must
// yield, and the fuzz test holds Diff to it.
func Apply(observed *LoadBalancer, plan Plan) (*LoadBalancer, error) {
	out := Canonical(observed)
	if out == nil {
		if !plan.Create {
			return nil, fmt.Errorf("plan for %q changes a load balancer that does not exist", plan.Key)
		}
		out = &LoadBalancer{Key: plan.Key}
	}
	for _, op := range plan.Ops {
		if err := applyOp(out, op); err != nil {
			return nil, fmt.Errorf("apply %s: %w", op, err)
		}
	}
	return Canonical(out), nil
}

func applyOp(lb *LoadBalancer, op Op) error {
	l := lb.Listener(op.Listener)
	switch op.Kind {
	case OpCreateListener:
		if l != nil {
			return fmt.Errorf("listener exists")
		}
		lb.Listeners = append(lb.Listeners, canonicalListener(*op.Spec))
	case OpDeleteListener:
		if l == nil {
			return fmt.Errorf("no such listener")
		}
		for i := range lb.Listeners {
			if lb.Listeners[i].Name == op.Listener {
				lb.Listeners = append(lb.Listeners[:i], lb.Listeners[i+1:]...)
				break
			}
		}
	case OpUpdateListener:
		if l == nil {
			return fmt.Errorf("no such listener")
		}
		backends := l.Backends
		*l = *op.Spec
		l.Backends = backends
	case OpAddBackend, OpUpdateBackend, OpRemoveBackend:
		if l == nil {
			return fmt.Errorf("no such listener")
		}
		return applyBackendOp(l, op)
	default:
		return fmt.Errorf("unknown op kind %q", op.Kind)
	}
	return nil
}

func applyBackendOp(l *Listener, op Op) error {
	idx := -1
	for i, b := range l.Backends {
		if b.ID() == op.Backend.ID() {
			idx = i
		}
	}
	switch op.Kind {
	case OpAddBackend:
		if idx >= 0 {
			return fmt.Errorf("backend exists")
		}
		l.Backends = append(l.Backends, canonicalBackend(*op.Backend))
	case OpUpdateBackend:
		if idx < 0 {
			return fmt.Errorf("no such backend")
		}
		l.Backends[idx] = canonicalBackend(*op.Backend)
	case OpRemoveBackend:
		if idx < 0 {
			return fmt.Errorf("no such backend")
		}
		l.Backends = append(l.Backends[:idx], l.Backends[idx+1:]...)
	}
	return nil
}

// Equal reports whether two load balancers are the same once canonical;
// versions are not compared.
func Equal(a, b *LoadBalancer) bool {
	return Diff(a, b).Empty() && (a == nil) == (b == nil)
}
