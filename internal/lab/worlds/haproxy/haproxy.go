// Package haproxy is the lab's world of one HAProxy on the load-balancer
// host: written by zerodrop's controller (its HAProxy provider) in the
// gated modes, and in the upstream and recipe modes by the upstream
// service controller's cloud (package upstream), whose HAProxy the cloud's
// own code starts, so the baseline shares no code with zerodrop's
// provider. Counting proxies in front of HAProxy's runtime API sockets
// count the writes where they land, whoever writes.
package haproxy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/upstream"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	hprov "zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// Options are the world's variants.
type Options struct {
	// LoadBalancers is the number of load-balancer hosts the lab's
	// network has (--data-plane-replicas; 0 or 1: one): with more, the
	// one HAProxy is on the first and the client is routed there only.
	LoadBalancers int
}

// World is one HAProxy.
type World struct{ opts Options }

// New is the world with opts.
func New(opts Options) *World { return &World{opts: opts} }

var (
	_ world.World        = (*World)(nil)
	_ world.WriteWatcher = (*run)(nil)
)

// Name names the world.
func (w *World) Name() string { return "one HAProxy" }

// Prepare: nothing the runs share.
func (w *World) Prepare(context.Context, world.Lab) error { return nil }

// Clock: none.
func (w *World) Clock(report.Mode, time.Duration) *report.AzureClock { return nil }

// run is a run's HAProxy: zerodrop's provider's view of it (gated modes)
// or the cloud's process (the others), and the counting proxies.
type run struct {
	world.Defaults // all but ServiceCreated, below

	w   *World
	env world.Env

	prov  *hprov.Provider     // gated modes
	cloud *supervisor.Process // the cloud's HAProxy (upstream and recipe modes)
	lb    string              // the cloud's name of the Service's load balancer

	mu    sync.Mutex // socks: Writes reads them from the progress lines' goroutine
	socks []*sockcount.Proxy
}

// NewRun is the world's side of one run.
func (w *World) NewRun(env world.Env) world.Run { return &run{w: w, env: env} }

// wrapper is a script that runs HAProxy in the load balancer's namespace:
// the lab starts it there, and a reload through the master CLI re-executes
// the master in the namespace it already has. It also moves the master CLI
// socket (`-S PATH,…`) to PATH.haproxy, where the counting proxy at PATH
// forwards: a reload binds the master socket again by the path on its
// command line, so a proxy put in its place afterwards would be replaced at
// the first reload.
func (h *run) wrapper() string {
	return filepath.Join(h.env.LabDir, fmt.Sprintf("haproxy-%d.sh", h.env.ID))
}

// Start starts the run's HAProxy with its counting proxies: through
// zerodrop's provider in the gated modes, through the cloud's own code in
// the others.
func (h *run) Start(ctx context.Context) error {
	env := h.env
	if err := cluster.WriteHAProxyWrapper(h.wrapper(), env.Net.LB.Name); err != nil {
		return err
	}
	if env.Mode.Gated() {
		prov, socks, err := cluster.StartHAProxy(ctx, env.Dir, h.wrapper())
		h.addSocks(socks...)
		if err != nil {
			return err
		}
		h.prov = prov
	} else if err := h.startCloud(ctx); err != nil {
		return err
	}
	if h.w.opts.LoadBalancers >= 2 {
		// One HAProxy, on the first load balancer's host: the client
		// sends there only.
		if err := env.Net.RouteTo(ctx, true, 0); err != nil {
			return err
		}
	}
	return nil
}

// startCloud starts the cloud's HAProxy (upstream.StartHAProxy) with the
// counting proxies in front of its sockets: the master's in place before
// HAProxy starts (the wrapper moves HAProxy's behind it), the admin
// socket's at the path the cloud's configuration names, which its reloads
// keep.
func (h *run) startCloud(ctx context.Context) error {
	dir := h.env.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	master, err := sockcount.Listen(filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.haproxy"))
	if err != nil {
		return err
	}
	h.addSocks(master)
	if h.cloud, err = upstream.StartHAProxy(ctx, dir, h.wrapper()); err != nil {
		return err
	}
	admin, err := sockcount.Interpose(filepath.Join(dir, "admin.sock"))
	if err != nil {
		return err
	}
	h.addSocks(admin)
	return nil
}

func (h *run) addSocks(p ...*sockcount.Proxy) {
	h.mu.Lock()
	h.socks = append(h.socks, p...)
	h.mu.Unlock()
}

// Stop stops HAProxy, through its master socket with the proxy still in
// front, then the proxies. An old worker the master no longer lists (a run
// with hundreds of reloads, connections to vanished pods held for the
// server timeout) would outlive it: every process of that HAProxy is ended,
// by the configuration file on its command line.
func (h *run) Stop() {
	if h.prov != nil {
		_ = h.prov.Close()
	}
	if h.cloud != nil {
		if err := h.cloud.Stop(); err != nil {
			h.env.Logf("%s: the cloud's HAProxy: %v", h.env.Name, err)
		}
	}
	if h.prov != nil || h.cloud != nil {
		if n := cluster.KillByArg(filepath.Join(h.env.Dir, "haproxy.cfg")); n > 0 {
			h.env.Logf("%s: killed %d HAProxy processes of %s left after the master stopped", h.env.Name, n, h.env.Dir)
		}
	}
	for _, p := range h.socks {
		if err := p.Close(); err != nil {
			h.env.Logf("%s: %v", h.env.Name, err)
		}
	}
}

// ControllerArgs point either controller at the run's HAProxy.
func (h *run) ControllerArgs(base []string) []string {
	return append(base, "--haproxy-dir="+h.env.Dir, "--haproxy-binary="+h.wrapper())
}

// ServiceCreated learns the cloud's name of the Service's load balancer.
func (h *run) ServiceCreated(svc *corev1.Service) { h.lb = upstream.LoadBalancerName(svc) }

// Writes are the HAProxy runtime API writes (commands and reloads) counted
// at its sockets, and an error when a socket's proxy was bypassed.
func (h *run) Writes() (int64, error) {
	h.mu.Lock()
	socks := slices.Clone(h.socks)
	h.mu.Unlock()
	return sockcount.Landed(socks)
}

// OnWrite watches the writes at HAProxy's sockets.
func (h *run) OnWrite(f func(verb string)) {
	h.mu.Lock()
	socks := slices.Clone(h.socks)
	h.mu.Unlock()
	sockcount.OnWriteAll(socks, f)
}

// Backends reads the run's backends: from zerodrop's provider, or in the
// upstream and recipe modes from the cloud's own configuration, which
// shares no names with zerodrop's (cloudBackends).
func (h *run) Backends(ctx context.Context, _ string) ([]provider.BackendStatus, error) {
	if h.prov != nil {
		return h.prov.Backends(ctx, h.env.Key)
	}
	return h.cloudBackends(ctx)
}

// cloudBackends reads the cloud's rules of the run's Service from `show
// stat` at the admin socket (through the counting proxy: a read) and puts
// them in the form the lab's readers take: each rule as the Service port's
// listener, each node active (the cloud never drains), and healthy when its
// probe holds it in rotation.
func (h *run) cloudBackends(ctx context.Context) ([]provider.BackendStatus, error) {
	bs, err := upstream.ReadBackends(ctx, filepath.Join(h.env.Dir, "admin.sock"), h.lb)
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(h.env.Key, "/")
	out := make([]provider.BackendStatus, 0, len(bs))
	for _, b := range bs {
		state := model.Active
		if b.Status == "MAINT" {
			state = hprov.StateMaint
		}
		out = append(out, provider.BackendStatus{
			Listener:    model.ListenerName(ns, name, corev1.ProtocolTCP, b.Port),
			Address:     b.Address,
			Port:        b.BackendPort,
			State:       state,
			Healthy:     b.Up(),
			HealthKnown: true,
			Connections: b.Sessions,
		})
	}
	return out, nil
}

var (
	_ world.Variant = (*World)(nil)
	_ world.Hosts   = (*World)(nil)
)

// LoadBalancerHosts is the network's load-balancer hosts.
func (w *World) LoadBalancerHosts() int { return max(1, w.opts.LoadBalancers) }

// Variant says on how many load-balancer hosts the one HAProxy's network
// is (it runs on the first).
func (w *World) Variant() string {
	return fmt.Sprintf("load-balancer hosts %d", max(1, w.opts.LoadBalancers))
}
