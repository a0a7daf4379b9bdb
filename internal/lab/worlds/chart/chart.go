// Package chart is the lab's world of zerodrop installed from the
// repository's chart (`zerodrop lab --from-chart --data-plane-replicas N`):
// zerodrop mode's zerodrop is rendered with `helm template` (the real helm
// CLI) and applied (server-side) per run, with values that only place it in
// the lab (install.go); the lab's kubelet runs the chart's pods and the
// DaemonSet controller of kube-controller-manager puts the data plane on
// the load-balancer hosts, registered as Nodes. The chart's webhook is
// called by the API server through its Service, its drain Service carries
// the drain hooks, and every process authenticates as its pod's
// ServiceAccount. The lab watches the data plane's pods (package
// dataplane) to count every write at HAProxy's sockets. The other modes
// run in the world of one HAProxy (package haproxy) on the first host.
package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// Options are the world's variants.
type Options struct {
	// Replicas is the data plane's replicas (the load-balancer hosts the
	// DaemonSet runs on), 2 to dataplane.MaxReplicas.
	Replicas int
	// Update is the data-plane DaemonSet's update strategy, set through
	// the chart's haproxy.updateStrategy at install: report.UpdateSurge or
	// report.UpdateUnavailable ("": the chart's default).
	Update string
	// HardStopAfter, when set, is the chart's haproxy.hardStopAfter: it
	// bounds an old HAProxy's drain (lb-update's timed WebSockets spread
	// over twice it), so a short one makes a short update.
	HardStopAfter time.Duration
	// GracePeriod, when set, is the chart's terminationGracePeriodSeconds
	// (0: the chart's 60 s): with no hardStopAfter, it bounds an old
	// HAProxy's drain.
	GracePeriod time.Duration
	// Router is the router in front of zerodrop mode's data plane
	// (--router; "": the lab's stand-in): with FRR the chart's speaker
	// DaemonSet is installed too (haproxy.bgp).
	Router dataplane.Router
	// UnbalancedTimer is, with Router frr-resilient, the kernel's
	// unbalanced timer of the lab's resilient groups (0: none).
	UnbalancedTimer time.Duration
}

// World is zerodrop installed from the chart.
type World struct {
	dataplane.WorldBase

	update        string        // Options.Update
	hardStopAfter time.Duration // Options.HardStopAfter
	gracePeriod   time.Duration // Options.GracePeriod

	mu  sync.Mutex
	cur *run // zerodrop mode's run under way: the agent's hooks go to it
}

// New is the world with opts.
func New(opts Options) *World {
	w := &World{WorldBase: dataplane.NewWorldBase(opts.Replicas), update: opts.Update, hardStopAfter: opts.HardStopAfter,
		gracePeriod: opts.GracePeriod}
	w.Router, w.UnbalancedTimer = opts.Router, opts.UnbalancedTimer
	return w
}

// Variant is the replicas and, when given, the update strategy.
func (w *World) Variant() string {
	v := w.WorldBase.Variant()
	if w.update != "" {
		v += ", data-plane update " + w.update
	}
	if w.hardStopAfter > 0 {
		v += ", haproxy.hardStopAfter " + w.hardStopAfter.String()
	}
	if w.gracePeriod > 0 {
		v += ", terminationGracePeriodSeconds " + strconv.Itoa(int(w.gracePeriod/time.Second))
	}
	return v
}

var (
	_ world.World       = (*World)(nil)
	_ world.Hosts       = (*World)(nil)
	_ world.Variant     = (*World)(nil)
	_ world.Installer   = (*World)(nil)
	_ world.KillDefault = (*World)(nil)

	_ world.DataPlane        = (*run)(nil)
	_ world.ControllerPods   = (*run)(nil)
	_ world.AdmissionWaiter  = (*run)(nil)
	_ world.SlowRestarts     = (*run)(nil)
	_ world.WriterRestarter  = (*run)(nil)
	_ world.MidPlanWriters   = (*run)(nil)
	_ world.ReplicaDisruptor = (*run)(nil)
)

// Name names the world.
func (w *World) Name() string { return string(world.Chart) }

// InstallsZerodrop: the chart brings zerodrop's webhook and drain Service.
func (w *World) InstallsZerodrop() bool { return true }

// DefaultKills is kill-mid-plan's count of kills on the chart's install
// when ChaosOptions.MidPlanKills is 0: each kill there waits out the
// kubelet's back-off before the killed container runs again (10 s,
// doubling with each restart of the same container), so 20 kills of two
// containers would take about an hour; 4 kill each replica's writer twice.
const DefaultKills = 4

// MidPlanKills is DefaultKills.
func (w *World) MidPlanKills() int { return DefaultKills }

// Prepare readies the lab to run the chart's pods: the images (the
// production build and the haproxy wrapper), the API server's CA for the
// pods' service account directories, the load-balancer hosts as data-plane
// Nodes, and the agent's container runtime.
func (w *World) Prepare(ctx context.Context, lab world.Lab) error {
	if err := w.WorldBase.Prepare(ctx, lab); err != nil {
		return err
	}
	lab.Progressf("building the production zerodrop for the chart's images")
	imageDir := filepath.Join(lab.Dir, "image")
	if err := prepareImages(ctx, imageDir); err != nil {
		return err
	}
	caFile := filepath.Join(lab.Dir, "apiserver-ca.crt")
	if err := os.WriteFile(caFile, lab.CP.Config.CAData, 0o644); err != nil {
		return err
	}
	lab.Agent.AddHostNodes(lab.Net.LBs)
	lab.Agent.Containers = &cluster.ContainerEnv{ImageDir: imageDir, Dir: filepath.Join(lab.Dir, "p"), CAFile: caFile,
		Token: dataplane.ServiceAccountToken(lab.CP.Client), BeforeStart: w.beforeContainer, AfterStop: w.afterPod}
	return nil
}

// current is zerodrop mode's run under way (nil: none).
func (w *World) current() *run {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// beforeContainer is the agent's ContainerEnv.BeforeStart: the current
// run's data plane watches its pods' containers start.
func (w *World) beforeContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, hostPath func(string) (string, bool)) error {
	if r := w.current(); r != nil {
		return r.Plane.BeforeContainer(ctx, pod, c, hostPath)
	}
	return nil
}

// afterPod is the agent's ContainerEnv.AfterStop: a data-plane pod of the
// run that has ended is retired.
func (w *World) afterPod(pod *corev1.Pod) {
	if r := w.current(); r != nil {
		r.Plane.PodEnded(pod)
	}
}

// NewRun is the chart's install in zerodrop mode, one HAProxy in the
// others.
func (w *World) NewRun(env world.Env) world.Run {
	var r *run
	if env.Mode == report.ModeZerodrop {
		r = &run{w: w, name: "zerodrop-" + strconv.Itoa(env.ID)}
		r.RunBase = dataplane.RunBase{Env: env, Plane: w.RunPlane(env, r.dataPlaneName())}
	}
	w.mu.Lock()
	w.cur = r
	w.mu.Unlock()
	if r == nil {
		return w.One.NewRun(env)
	}
	return r
}

// run is zerodrop mode's install of the chart.
type run struct {
	dataplane.RunBase
	w    *World
	name string                       // the release's object names (fullnameOverride)
	objs []*unstructured.Unstructured // the install
	stop context.CancelFunc           // the router stand-in
	// idleRestarts counts restart-idle's restarts: each restarts the next
	// replica's container.
	idleRestarts int
}

// dataPlaneName is the name of the chart's data-plane DaemonSet (and its
// pods' app.kubernetes.io/name).
func (r *run) dataPlaneName() string { return r.name + "-data-plane" }

// Start installs the chart and starts its data plane (see
// dataplane.Plane.StartChart); the router stand-in runs until Stop.
func (r *run) Start(ctx context.Context) error {
	if err := r.install(ctx); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.Background())
	r.stop = stop
	return r.Plane.StartChart(ctx, runCtx)
}

// Stop retires every replica, uninstalls the chart, routes the client to
// the first load balancer only and closes the counting proxies.
func (r *run) Stop() {
	if r.stop != nil {
		r.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r.Plane.RetireAll()
	if err := r.uninstall(ctx, 75*time.Second); err != nil {
		r.Env.Logf("%s: uninstall the chart: %v", r.Env.Name, err)
	}
	r.Plane.Stop(ctx)
}

// OwnsWriters: the chart's controllers and data plane are the writers.
func (r *run) OwnsWriters() bool { return true }

// ControllerSelector are the chart's controller pods.
func (r *run) ControllerSelector() map[string]string {
	return map[string]string{dataplane.LabelAppName: r.name}
}

// Views are the replicas' HAProxy instances but one on a failed node
// (lb-replica-restart): no traffic reaches it.
func (r *run) Views() []world.View {
	return r.Plane.Views(r.Env.Key, func(d *dataplane.Replica) bool { return r.w.Lab.Agent.NodeDown(cluster.HostNodeName(d.Index())) })
}

// pods lists the run's pods of the chart object called name (its
// app.kubernetes.io/name) from the agent's cache.
func (r *run) pods(name string) []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{dataplane.LabelAppName: name})
	pods, _ := r.w.Lab.Agent.Pods.Pods(world.ControllerNamespace).List(sel)
	return pods
}

// Scrapes are the running data-plane pods' controller containers.
func (r *run) Scrapes() []world.Scrape {
	var out []world.Scrape
	for _, p := range r.pods(r.dataPlaneName()) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			if s, ok := podScrape(p); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// PodScrape: a data-plane pod's last scrape.
func (r *run) PodScrape(p *corev1.Pod) (world.Scrape, bool) {
	if p.Labels[dataplane.LabelAppName] != r.dataPlaneName() {
		return world.Scrape{}, false
	}
	s, _ := podScrape(p)
	return s, true
}

// podScrape is a data-plane pod's controller container, keyed by pod and
// restarts (a restarted process counts from zero); !ok: no address yet.
func podScrape(p *corev1.Pod) (world.Scrape, bool) {
	if p.Status.PodIP == "" {
		return world.Scrape{}, false
	}
	restarts := cluster.ContainerRestarts(p, world.ControllerContainer)
	return world.Scrape{Key: cluster.ProcessKey(p, world.ControllerContainer), Name: fmt.Sprintf("%s/%d", p.Name, restarts), IP: p.Status.PodIP}, true
}
