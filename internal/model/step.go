package model

import (
	"k8s.io/apimachinery/pkg/util/intstr"
)

// StepOptions are the inputs of Step that are not load balancers.
type StepOptions struct {
	// Drained reports whether a draining backend may go: its connections
	// reached zero or its drain timeout passed. Nil means never.
	Drained func(listener string, b Backend) bool
	// MaxUnavailable is the share of a listener's serving backends one step
	// may take out of service (default DefaultMaxUnavailable).
	MaxUnavailable func(listener string) intstr.IntOrString
	// Keep reports a listener whose draining backends stay in the pool until
	// desired no longer has them (node mode: a node with no local endpoint of
	// an externalTrafficPolicy Local Service is drained, not removed). Such a
	// backend is drained at once, outside the MaxUnavailable budget (it serves
	// nothing new: kube-proxy would send only to a terminating pod), and
	// added drained when the load balancer lacks it. Nil means none.
	Keep func(listener string) bool
	// Up reports a backend the load balancer's health check has up. On a
	// Keep listener a node backend that is up is not drained while no other
	// backend that stays active is up: with externalTrafficPolicy Local the
	// node whose last pod stops would otherwise leave the pool before the
	// node of its replacement passes its first checks, and nothing would
	// serve. It stays active (its own health check takes it out when kube-proxy
	// reports no ready local endpoint) and the step is pending. Nil: unknown,
	// no such hold.
	Up func(listener string, b Backend) bool
	// Stays reports a draining backend desired no longer has that still
	// forwards its established connections for as long as it stands: a
	// node marked leaving (NodeExcluded) whose Node is not being deleted.
	// Until Drained says it may go (its connections ended), it is kept
	// drained without being pending: its drain ends with the Node, whose
	// deletion (an event) takes it out of Stays, not with a clock. Nil
	// means none.
	Stays func(listener string, b Backend) bool
}

// StepResult says whether the step held anything back.
type StepResult struct {
	// Pending is true when the returned state is not yet desired: backends
	// are draining or removals were held back by MaxUnavailable. The caller
	// reconciles again shortly.
	Pending bool
}

// Step returns the next state to apply on the way from observed to desired,
// keeping invariants 3 and 4:
//
//   - a backend leaves in two phases: an active backend that desired no
//     longer has (or has as draining) first becomes draining — no new
//     connections, established ones continue — and is removed only once
//     Drained says so;
//   - one step takes at most MaxUnavailable of a listener's serving backends
//     out of service (at least one), while the backends desired adds are
//     added at once, so a rollout's new pool is in place before the old one
//     has drained;
//   - a draining backend that the load balancer does not have is not added;
//   - except on a listener Keep names, where desired draining backends are
//     kept, drained at once and added drained (see StepOptions.Keep).
//
// Step is pure: the caller supplies connection counts and clocks through
// Drained.
func Step(observed, desired *LoadBalancer, opts StepOptions) (*LoadBalancer, StepResult) {
	des := Canonical(desired)
	if des == nil || observed == nil {
		return des, StepResult{}
	}
	obs := Canonical(observed)
	var res StepResult
	for i := range des.Listeners {
		l := &des.Listeners[i]
		o := obs.Listener(l.Name)
		if o == nil {
			if opts.Keep == nil || !opts.Keep(l.Name) {
				l.Backends = dropDraining(l.Backends)
			}
			continue
		}
		if stepListener(o, l, opts) {
			res.Pending = true
		}
	}
	return Canonical(des), res
}

func dropDraining(bs []Backend) []Backend {
	out := bs[:0]
	for _, b := range bs {
		if b.State != Draining {
			out = append(out, b)
		}
	}
	return out
}

// stepListener rewrites l.Backends in place; it reports whether anything is
// still on its way.
func stepListener(o, l *Listener, opts StepOptions) bool {
	want := map[string]Backend{}
	for _, b := range l.Backends {
		want[b.ID()] = b
	}
	serving := 0
	for _, b := range o.Backends {
		if b.State == Active {
			serving++
		}
	}
	budget := maxUnavailable(opts, l.Name, serving)
	drained := func(b Backend) bool { return opts.Drained != nil && opts.Drained(l.Name, b) }
	keep := opts.Keep != nil && opts.Keep(l.Name)
	// The backends that stay active and are up: a kept node is drained only
	// while one of them, another, serves.
	stayUp := map[string]bool{}
	if keep && opts.Up != nil {
		for _, ob := range o.Backends {
			if wb, ok := want[ob.ID()]; ok && wb.State == Active && ob.State == Active && opts.Up(l.Name, ob) {
				stayUp[ob.ID()] = true
			}
		}
	}
	lastUp := func(ob Backend) bool {
		if !keep || opts.Up == nil || ob.State != Active || !opts.Up(l.Name, ob) {
			return false
		}
		for id := range stayUp {
			if id != ob.ID() {
				return false
			}
		}
		return true
	}

	pending := false
	var out []Backend
	for _, ob := range o.Backends {
		wb, wanted := want[ob.ID()]
		delete(want, ob.ID())
		switch {
		case (!wanted || wb.State == Draining) && lastUp(ob):
			// The last node up: it serves until another is up.
			out = append(out, ob)
			pending = true
		case wanted && (wb.State == Active || keep):
			out = append(out, wb)
		case ob.State == Active:
			// Leaving: drain first, within the step's budget.
			if budget > 0 {
				budget--
				d := ob
				d.State, d.Weight = Draining, 0
				out = append(out, d)
			} else {
				out = append(out, ob)
			}
			pending = true
		case drained(ob):
			// Draining and drained: remove (not appended).
		case opts.Stays != nil && opts.Stays(l.Name, ob):
			// A leaving node that still forwards: kept drained.
			out = append(out, ob)
		default:
			out = append(out, ob)
			pending = true
		}
	}
	// What observed does not have: add active backends; never add draining ones.
	for _, b := range want {
		if b.State == Active || keep {
			out = append(out, b)
		}
	}
	l.Backends = out
	return pending
}

func maxUnavailable(opts StepOptions, listener string, serving int) int {
	v := DefaultMaxUnavailable
	if opts.MaxUnavailable != nil {
		v = opts.MaxUnavailable(listener)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, serving, false)
	if err != nil || n < 1 {
		// At least one per step, or a pool of three could never change.
		n = 1
	}
	return n
}
