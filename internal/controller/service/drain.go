package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/model"
)

// drainClock remembers when this controller first saw each backend draining.
// After a restart the clock starts again: a backend then drains a little
// longer, never shorter.
type drainClock struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func newDrainClock() *drainClock { return &drainClock{since: map[string]time.Time{}} }

func (d *drainClock) started(id string, now time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.since[id]
	if !ok {
		d.since[id] = now
		t = now
	}
	return t
}

// keep forgets the backends of lbKey that are not draining any more.
func (d *drainClock) keep(lbKey string, lb *model.LoadBalancer) {
	live := map[string]bool{}
	if lb != nil {
		for _, l := range lb.Listeners {
			for _, b := range l.Backends {
				if b.State == model.Draining {
					live[drainID(lbKey, l.Name, b)] = true
				}
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.since {
		if strings.HasPrefix(id, lbKey+"|") && !live[id] {
			delete(d.since, id)
		}
	}
}

func drainID(lbKey, listener string, b model.Backend) string {
	return lbKey + "|" + listener + "|" + b.ID()
}

// step turns desired into the next safe state (model.Step): removed backends
// drain first and go once their connections reach zero or their drain timeout
// passes; a node marked leaving that still stands (staying) goes only once
// its connections reach zero, or with its Node; one step takes at most
// max-unavailable of a pool out of service. It reports whether more steps
// are to come.
func (c *Controller) step(ctx context.Context, key string, st *state, observed, desired *model.LoadBalancer, staying map[string]bool) (*model.LoadBalancer, bool, error) {
	if observed == nil || desired == nil {
		return desired, false, nil
	}
	configs := map[string]model.ServiceConfig{}
	// podBacked: the Services whose endpoints are their selector's pods
	// (a Service without one may list any address: podgone.go).
	podBacked := map[string]bool{}
	for _, in := range append(st.active[:len(st.active):len(st.active)], st.held...) {
		configs[in.Service.Namespace+"/"+in.Service.Name+"/"] = in.Config
		podBacked[in.Service.Namespace+"/"+in.Service.Name+"/"] = len(in.Service.Spec.Selector) > 0
	}
	configOf := func(listener string) model.ServiceConfig {
		for prefix, cfg := range configs {
			if strings.HasPrefix(listener, prefix) {
				return cfg
			}
		}
		// A Service no longer collected (leaving): IP mode, as before a
		// provider could default to another.
		cfg, _ := model.ParseServiceConfig(nil, model.IPMode)
		return cfg
	}

	// Connection counts are read only when something is draining, so a
	// no-op reconcile stays at one read.
	keep := func(listener string) bool { return configOf(listener).Mode == model.NodeMode }
	// Connection counts and health are read only when something is
	// draining or a node is about to be, so a no-op reconcile stays at one
	// read.
	conns := map[string]int64{}
	var up map[string]bool
	leaving := nodeLeaving(observed, desired, keep)
	if hasDraining(observed, desired, keep) || leaving {
		statuses, err := c.opts.Provider.Backends(ctx, key)
		switch {
		case err == nil:
			up = map[string]bool{}
			for _, s := range statuses {
				id := s.Listener + "|" + model.Backend{Address: s.Address, Port: s.Port}.ID()
				conns[id] = s.Connections
				up[id] = !s.HealthKnown || s.Healthy
			}
		case leaving || ctx.Err() != nil:
			// A node about to leave needs health to keep the last one up.
			return nil, false, fmt.Errorf("read backend status of %s: %w", key, err)
		default:
			// Only the counts are missing; they decide no more than a
			// removal before the drain timeout. Without them the draining
			// backends wait for their timeout, and the rest of the step
			// goes on: a new drain must not wait for a read that can fail
			// long (HAProxy's master busy: Backends asks it for the old
			// workers' connections), or its pod's gate would let the pod
			// stop at its bound while it still gets new connections.
			logFrom(ctx).Info("connection counts unreadable; draining backends wait for their drain timeout", "err", err)
			c.opts.Metrics.ProviderErrors.WithLabelValues(c.opts.Provider.Name(), "backends").Inc()
		}
	}
	now := time.Now()
	stays := func(listener string, b model.Backend) bool { return staying[b.Address] && keep(listener) }
	stopped := c.stoppedPods(ctx, desired, func(listener string) bool {
		// A listener is namespace/name/proto-port.
		return podBacked[listener[:strings.LastIndexByte(listener, '/')+1]] && configOf(listener).Mode == model.IPMode
	})
	next, res := model.Step(observed, desired, model.StepOptions{
		Drained: func(listener string, b model.Backend) bool {
			since := c.drains.started(drainID(key, listener, b), now)
			n, counted := conns[listener+"|"+b.ID()]
			if counted && n == 0 {
				return true
			}
			// Uncounted (podgone.go): a stopped pod has none left.
			if (!counted || n < 0) && stopped.stopped(listener, b) {
				return true
			}
			// A staying node's connections are not the drain timeout's to
			// cut (where the provider counts none, -1, it stays drained
			// until its Node goes).
			return !stays(listener, b) && now.Sub(since) >= configOf(listener).DrainTimeout
		},
		MaxUnavailable: func(listener string) intstr.IntOrString { return configOf(listener).MaxUnavailable },
		Keep:           keep,
		Up:             upFunc(up),
		Stays:          stays,
	})
	c.drains.keep(key, next)
	return next, res.Pending, nil
}

// upFunc is model.StepOptions.Up from the provider's health reports (nil:
// not read, no hold).
func upFunc(up map[string]bool) func(string, model.Backend) bool {
	if up == nil {
		return nil
	}
	return func(listener string, b model.Backend) bool { return up[listener+"|"+b.ID()] }
}

// nodeLeaving reports an active backend of a listener keep names that
// desired drains or no longer has: the step needs health to keep the last
// node up (model.StepOptions.Up).
func nodeLeaving(observed, desired *model.LoadBalancer, keep func(string) bool) bool {
	for _, l := range observed.Listeners {
		if !keep(l.Name) {
			continue
		}
		want := wanted(desired, l.Name)
		for _, b := range l.Backends {
			if w, ok := want[b.ID()]; b.State == model.Active && (!ok || w.State == model.Draining) {
				return true
			}
		}
	}
	return false
}

// wanted is desired's listener name by backend ID (empty when desired has
// no such listener).
func wanted(desired *model.LoadBalancer, listener string) map[string]model.Backend {
	want := map[string]model.Backend{}
	if dl := desired.Listener(listener); dl != nil {
		for _, b := range dl.Backends {
			want[b.ID()] = b
		}
	}
	return want
}

// hasDraining reports a draining backend on its way out of observed. A node
// kept drained on a listener keep names (externalTrafficPolicy Local, no
// local endpoint) is not: it may stay so for good, and a reconcile that
// changes nothing must stay at one read.
func hasDraining(observed, desired *model.LoadBalancer, keep func(string) bool) bool {
	for _, l := range observed.Listeners {
		var want map[string]model.Backend
		if keep(l.Name) {
			want = wanted(desired, l.Name)
		}
		for _, b := range l.Backends {
			if b.State != model.Draining {
				continue
			}
			if w, ok := want[b.ID()]; ok && w.State == model.Draining {
				continue
			}
			return true
		}
	}
	return false
}
