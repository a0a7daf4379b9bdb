package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/haproxy"
	"zerodrop.dev/zerodrop/internal/provider"
)

// HardDetect is how long a hard-failed replica's route stays announced in
// lb-replica-restart: as BFD with a 1 s interval and a multiplier of 3
// would take to withdraw it.
const HardDetect = 3 * time.Second

// ForRun is the data plane of a world's run of n replicas: the lab's own
// arrangement, or with daemonSet the chart's DaemonSet of that name.
func ForRun(lab world.Lab, env world.Env, n int, daemonSet string) *Plane {
	return New(Config{
		Client: lab.CP.Client, REST: lab.CP.Config, Net: lab.Net, Agent: lab.Agent, Token: ServiceAccountToken(lab.CP.Client),
		Executable: lab.Executable, LogDir: lab.Dir, Dir: env.Dir,
		RunID: env.ID, Class: env.Class, Replicas: n, DaemonSet: daemonSet,
		Name: env.Name, Logf: env.Logf, Mark: env.Mark,
	})
}

// View is replica d's HAProxy as the runner's steady check reads it: the
// backends of the Service key.
func View(d *Replica, key string) world.View {
	return world.View{Name: strconv.Itoa(d.Index()), Backends: func(ctx context.Context) ([]provider.BackendStatus, error) {
		prov := d.Provider()
		if prov == nil {
			return nil, errors.New("its HAProxy is not viewed yet")
		}
		return prov.Backends(ctx, key)
	}}
}

// Views are the replicas' HAProxy instances but those skip says no
// traffic reaches.
func (p *Plane) Views(key string, skip func(d *Replica) bool) []world.View {
	var out []world.View
	for _, d := range p.Replicas() {
		if skip == nil || !skip(d) {
			out = append(out, p.routedView(View(d, key), d, key))
		}
	}
	return out
}

// ProcessScrapes are the running replica processes' metrics endpoints
// (the lab's own arrangement), keyed by process.
func (p *Plane) ProcessScrapes() []world.Scrape {
	var out []world.Scrape
	for _, d := range p.Replicas() {
		proc, n := d.ProcessRun()
		if proc == nil || proc.Exited() {
			continue
		}
		name := fmt.Sprintf("%s/%d", d.Pod(), n)
		out = append(out, world.Scrape{Key: "process:" + name, Name: name, IP: d.host.IP.String()})
	}
	return out
}

// OtherMembers are the route members of reps but d.
func OtherMembers(reps []*Replica, d *Replica) []int {
	var out []int
	for _, o := range reps {
		if o.Index() != d.Index() {
			out = append(out, o.Index())
		}
	}
	return out
}

// RunBase is what a world's run of replicas has in common with every
// other (the lab's own, the chart's): embedded, it answers the world.Run
// and world.DataPlane questions whose answer is the plane's.
type RunBase struct {
	world.Defaults
	Env   world.Env
	Plane *Plane
}

// Backends are the first replica's (which lb-replica-restart never
// replaces).
func (b *RunBase) Backends(ctx context.Context, _ string) ([]provider.BackendStatus, error) {
	return View(b.Plane.Replicas()[0], b.Env.Key).Backends(ctx)
}

// Writes are the writes counted at every replica's sockets (a retired
// chart pod's too).
func (b *RunBase) Writes() (int64, error) { return b.Plane.Landed() }

// Replicas is the number of replicas.
func (b *RunBase) Replicas() int { return len(b.Plane.Replicas()) }

// Sessions are the connections each replica's HAProxy accepted.
func (b *RunBase) Sessions() []int64 { return b.Plane.Sessions() }

// PodStopping marks a data-plane pod's termination; its node's route
// stays (Plane.Stopping).
func (b *RunBase) PodStopping(p *corev1.Pod) { b.Plane.Stopping(p) }

// WorldBase is what the worlds of replicas share: their number, and the
// world of one HAProxy every mode but zerodrop runs in.
type WorldBase struct {
	N   int
	One *haproxy.World
	Lab world.Lab
	// Router is the router in front of zerodrop mode's data plane
	// ("": the stand-in); with FRR, frr is the lab's, from Prepare on.
	Router Router
	// UnbalancedTimer is, with RouterFRRResilient, the kernel's unbalanced
	// timer of the lab's resilient groups (--router-unbalanced-timer; 0:
	// none, a member added gets idle buckets only).
	UnbalancedTimer time.Duration
	frr             *FRR
}

// NewWorldBase is the base of a world of n replicas.
func NewWorldBase(n int) WorldBase {
	return WorldBase{N: n, One: haproxy.New(haproxy.Options{LoadBalancers: n})}
}

// Variant is the number of replicas, and the router when it is FRR.
func (w *WorldBase) Variant() string {
	v := fmt.Sprintf("%d data-plane replicas", w.N)
	if w.Router.FRR() {
		v += ", router " + string(w.Router)
	}
	if w.Router == RouterFRRResilient && w.UnbalancedTimer > 0 {
		v += fmt.Sprintf(" (unbalanced timer %s)", w.UnbalancedTimer)
	}
	return v
}

// LoadBalancerHosts: one per replica.
func (w *WorldBase) LoadBalancerHosts() int { return w.N }

// Clock: none.
func (w *WorldBase) Clock(report.Mode, time.Duration) *report.AzureClock { return nil }

// Prepare keeps the lab for the runs.
func (w *WorldBase) Prepare(ctx context.Context, lab world.Lab) error {
	w.Lab = lab
	if err := w.One.Prepare(ctx, lab); err != nil {
		return err
	}
	if !w.Router.FRR() {
		return nil
	}
	lab.Progressf("starting the router: FRR (%s) in %s", w.Router, lab.Net.Router.Name)
	frr, err := StartFRR(ctx, lab, w.Router)
	if err != nil {
		return err
	}
	w.frr = frr
	progCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	lab.Net.AtClose(func() {
		stop()
		<-done
		frr.Close()
	})
	if w.Router != RouterFRRResilient {
		close(done)
		return nil
	}
	var hosts []netip.Addr
	for _, h := range lab.Net.LBs {
		hosts = append(hosts, h.IP)
	}
	go func() {
		defer close(done)
		frr.programResilient(progCtx, netip.MustParsePrefix(cluster.FrontendNet), hosts, w.UnbalancedTimer)
	}()
	return nil
}

// RunPlane is the data plane of a run (ForRun) behind the world's router.
func (w *WorldBase) RunPlane(env world.Env, daemonSet string) *Plane {
	p := ForRun(w.Lab, env, w.N, daemonSet)
	p.cfg.FRR = w.frr
	return p
}

// ChartValues are the chart values the world's router needs (helm --set):
// with FRR, the speaker DaemonSet peering with it, for the Services of
// class; none with the stand-in.
func (w *WorldBase) ChartValues(class string) []string {
	if w.frr == nil {
		return nil
	}
	return SpeakerValues(w.frr.host.IP, class)
}
