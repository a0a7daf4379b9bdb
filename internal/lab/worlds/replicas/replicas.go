// Package replicas is the lab's world of an HAProxy data plane of replicas
// (`zerodrop lab --data-plane-replicas N`): in zerodrop mode each
// load-balancer host runs its own HAProxy written by its own zerodrop
// process (the data-plane role), beside the controllers' control role, and
// the lab's router stand-in spreads the client's flows over the hosts
// (package dataplane). The other modes have no data plane of replicas:
// they run in the world of one HAProxy (package haproxy) on the first
// host.
package replicas

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/lab/worlds/haproxy"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Options are the world's variants.
type Options struct {
	// Replicas is the data plane's replicas, 2 to dataplane.MaxReplicas.
	Replicas int
}

// World is an HAProxy data plane of replicas.
type World struct {
	opts Options
	one  *haproxy.World // the other modes'
	lab  world.Lab
}

// New is the world with opts.
func New(opts Options) *World {
	return &World{opts: opts, one: haproxy.New(haproxy.Options{LoadBalancers: opts.Replicas})}
}

var (
	_ world.World   = (*World)(nil)
	_ world.Hosts   = (*World)(nil)
	_ world.Variant = (*World)(nil)

	_ world.DataPlane        = (*run)(nil)
	_ world.MidPlanWriters   = (*run)(nil)
	_ world.ReplicaDisruptor = (*run)(nil)
)

// Name names the world.
func (w *World) Name() string { return string(world.Replicas) }

// Variant is the number of replicas.
func (w *World) Variant() string { return fmt.Sprintf("%d data-plane replicas", w.opts.Replicas) }

// LoadBalancerHosts: one per replica.
func (w *World) LoadBalancerHosts() int { return w.opts.Replicas }

// Prepare keeps the lab for the runs.
func (w *World) Prepare(ctx context.Context, lab world.Lab) error {
	w.lab = lab
	return w.one.Prepare(ctx, lab)
}

// Clock: none.
func (w *World) Clock(report.Mode, time.Duration) *report.AzureClock { return nil }

// NewRun is a data plane of replicas in zerodrop mode, one HAProxy in the
// others.
func (w *World) NewRun(env world.Env) world.Run {
	if env.Mode != report.ModeZerodrop {
		return w.one.NewRun(env)
	}
	return &run{w: w, env: env, plane: dataplane.ForRun(w.lab, env, w.opts.Replicas, "")}
}

// run is zerodrop mode's data plane of replicas.
type run struct {
	w     *World
	env   world.Env
	plane *dataplane.Plane
}

// Start starts every replica and routes the client to them all.
func (r *run) Start(ctx context.Context) error { return r.plane.Start(ctx) }

// Stop ends every replica, routes the client to the first load balancer
// only, and closes the counting proxies.
func (r *run) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r.plane.Stop(ctx)
	r.plane.CloseSocks()
}

// OwnsWriters: the controllers' control role is the runner's pods.
func (r *run) OwnsWriters() bool { return false }

// ControllerArgs make the controllers the replicas' control role.
func (r *run) ControllerArgs(base []string) []string { return append(base, r.plane.ControlArgs()...) }

// Service: nothing to add.
func (r *run) Service(*corev1.Service) {}

// ServiceCreated: nothing to learn.
func (r *run) ServiceCreated(*corev1.Service) {}

// Forwards: none.
func (r *run) Forwards() []string { return nil }

// SteadyTimeout: nothing more.
func (r *run) SteadyTimeout(int32) time.Duration { return 0 }

// Backends are the first replica's (which lb-replica-restart never
// replaces).
func (r *run) Backends(ctx context.Context, _ string) ([]provider.BackendStatus, error) {
	return dataplane.View(r.plane.Replicas()[0], r.env.Key).Backends(ctx)
}

// Writes are the writes counted at every replica's sockets.
func (r *run) Writes() (int64, error) { return r.plane.Landed() }

// Replicas is the number of replicas.
func (r *run) Replicas() int { return len(r.plane.Replicas()) }

// Sessions are the connections each replica's HAProxy accepted.
func (r *run) Sessions() []int64 { return r.plane.Sessions() }

// Views are every replica's HAProxy.
func (r *run) Views() []world.View { return r.plane.Views(r.env.Key, nil) }

// Scrapes are the replicas' running processes.
func (r *run) Scrapes() []world.Scrape { return r.plane.ProcessScrapes() }

// PodScrape: a replica's Pod object has no process of the agent's.
func (r *run) PodScrape(*corev1.Pod) (world.Scrape, bool) { return world.Scrape{}, false }

// PodStopping: the router stand-in follows the lab's own replicas itself.
func (r *run) PodStopping(p *corev1.Pod) { r.plane.Stopping(p) }
