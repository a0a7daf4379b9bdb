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
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// Options are the world's variants.
type Options struct {
	// Replicas is the data plane's replicas, 2 to dataplane.MaxReplicas.
	Replicas int
}

// World is an HAProxy data plane of replicas.
type World struct{ dataplane.WorldBase }

// New is the world with opts.
func New(opts Options) *World { return &World{dataplane.NewWorldBase(opts.Replicas)} }

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

// NewRun is a data plane of replicas in zerodrop mode, one HAProxy in the
// others.
func (w *World) NewRun(env world.Env) world.Run {
	if env.Mode != report.ModeZerodrop {
		return w.One.NewRun(env)
	}
	return &run{w: w, RunBase: dataplane.RunBase{Env: env, Plane: dataplane.ForRun(w.Lab, env, w.N, "")}}
}

// run is zerodrop mode's data plane of replicas.
type run struct {
	dataplane.RunBase
	w *World
}

// Start starts every replica and routes the client to them all.
func (r *run) Start(ctx context.Context) error { return r.Plane.Start(ctx) }

// Stop ends every replica, routes the client to the first load balancer
// only, and closes the counting proxies.
func (r *run) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r.Plane.Stop(ctx)
}

// ControllerArgs make the controllers the replicas' control role.
func (r *run) ControllerArgs(base []string) []string { return append(base, r.Plane.ControlArgs()...) }

// Views are every replica's HAProxy.
func (r *run) Views() []world.View { return r.Plane.Views(r.Env.Key, nil) }

// Scrapes are the replicas' running processes.
func (r *run) Scrapes() []world.Scrape { return r.Plane.ProcessScrapes() }

// PodScrape: a replica's Pod object has no process of the agent's.
func (r *run) PodScrape(*corev1.Pod) (world.Scrape, bool) { return world.Scrape{}, false }
