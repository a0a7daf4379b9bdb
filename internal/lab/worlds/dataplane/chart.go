package dataplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// The data plane of a run installed from the chart (--from-chart): the
// chart's DaemonSet pods on the load-balancer hosts' Nodes, run by the
// lab's kubelet. The lab only watches: before a pod's haproxy container
// starts, it puts its counting proxy where the master CLI socket goes (the
// image's haproxy wrapper binds HAProxy's at PATH.haproxy); before the
// controller container starts, it waits for HAProxy's admin socket and
// interposes its counting proxy there, and attaches a read-only view
// (the scenarios' views) — so every write either container makes is
// counted at HAProxy's sockets, as in the lab's other arrangements.

// LabelAppName is the label naming a chart object's component (the
// DaemonSet's pods carry its name).
const LabelAppName = "app.kubernetes.io/name"

// BeforeContainer is the agent's containerEnv.beforeStart for a pod of the
// chart's data plane: see above.
func (p *Plane) BeforeContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, hostPath func(string) (string, bool)) error {
	if pod.Namespace != world.ControllerNamespace || pod.Labels[LabelAppName] != p.cfg.DaemonSet || len(c.Args) == 0 {
		return nil
	}
	d := p.chartReplica(pod)
	if d == nil {
		return fmt.Errorf("data-plane pod %s is on %s, not a load-balancer host", pod.Name, pod.Spec.NodeName)
	}
	switch c.Args[0] {
	case "haproxy":
		return p.beforeHAProxy(d, c, hostPath)
	case "controller":
		return p.beforeController(ctx, pod, d, c, hostPath)
	}
	return nil
}

// beforeHAProxy puts the counting proxy where HAProxy's master CLI socket
// goes, the first time the replica's haproxy container starts.
func (p *Plane) beforeHAProxy(d *Replica, c *corev1.Container, hostPath func(string) (string, bool)) error {
	dir, ok := hostPath(argValue(c.Args, "--dir"))
	if !ok {
		return fmt.Errorf("container %s: --dir is on no volume", c.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dir != "" {
		// Started again: the master CLI's proxy stays (HAProxy binds
		// the moved path); the new HAProxy binds the admin socket's
		// path itself, so the old one's proxy is retired and the
		// controller container's next start interposes again.
		p.dropAdmin(d)
		return nil
	}
	master, err := sockcount.Listen(filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.haproxy"))
	if err != nil {
		return err
	}
	d.dir = dir
	d.socks = append(d.socks, master)
	p.addSocks(master)
	return nil
}

// beforeController interposes the counting proxy at HAProxy's admin socket
// and attaches the lab's view, unless the view is attached already.
func (p *Plane) beforeController(ctx context.Context, pod *corev1.Pod, d *Replica, c *corev1.Container, hostPath func(string) (string, bool)) error {
	sock, ok := hostPath(argValue(c.Args, "--haproxy-socket"))
	if !ok {
		return fmt.Errorf("container %s: --haproxy-socket is on no volume", c.Name)
	}
	d.mu.Lock()
	viewed := d.prov != nil
	d.mu.Unlock()
	if viewed {
		return nil
	}
	return p.attachView(ctx, d, sock, "HAProxy's admin socket in "+pod.Name, nil)
}

// argValue is the value of --name=value in args.
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// hostIndex is the index of the load-balancer host of Node node (-1: none).
func (p *Plane) hostIndex(node string) int {
	for i := range p.cfg.Net.LBs {
		if cluster.HostNodeName(i) == node {
			return i
		}
	}
	return -1
}

// chartReplica returns the replica of the data-plane pod, made on first
// sight (nil when the pod is on no load-balancer host).
func (p *Plane) chartReplica(pod *corev1.Pod) *Replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.replicas {
		if d.podUID == pod.UID {
			return d
		}
	}
	i := p.hostIndex(pod.Spec.NodeName)
	if i < 0 {
		return nil
	}
	d := &Replica{index: i, gen: 1, runID: p.cfg.RunID, host: p.cfg.Net.LBs[i], podName: pod.Name, podUID: pod.UID}
	p.replicas = append(p.replicas, d)
	return d
}

// StartChart waits, once the chart is installed, until its DaemonSet has a
// ready pod on every load-balancer host and the lab views each replica's
// HAProxy, and routes the client to them all (as the operator's router
// daemon would announce a host once it serves). The router stand-in
// (router.go) runs until runCtx ends.
func (p *Plane) StartChart(ctx, runCtx context.Context) error {
	n := p.cfg.Replicas
	if err := p.watchNodes(ctx, runCtx); err != nil {
		return err
	}
	if p.cfg.FRR != nil {
		// From before the speakers may announce, so the run's first
		// announcements are on its record.
		p.startRouteRecorder(runCtx)
		// The speakers announce only once their Nodes are not leaving.
		if err := p.excludeHosts(ctx, false); err != nil {
			return err
		}
	}
	err := traffic.WaitFor(ctx, 120*time.Second, "the chart's data plane ready", func() (bool, string) {
		ds, err := p.cfg.Client.AppsV1().DaemonSets(world.ControllerNamespace).Get(ctx, p.cfg.DaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !DaemonSetReady(ds, n) {
			return false, fmt.Sprintf("%d of %d scheduled, %d ready", ds.Status.CurrentNumberScheduled, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		serving := len(p.serving())
		return serving == n, fmt.Sprintf("%d of %d hosts serving (a host whose Node leaves is not announced)", serving, n)
	})
	if err != nil {
		return err
	}
	if p.cfg.FRR != nil {
		return p.startFRRRoutes(ctx)
	}
	serving := p.serving()
	p.routeMu.Lock()
	err = p.setRoutesLocked(ctx, true, serving)
	p.routeMu.Unlock()
	if err != nil {
		return err
	}
	go p.routeLoop(runCtx)
	return nil
}

// DaemonSetReady: the DaemonSet's current generation has n pods, all
// updated and ready.
func DaemonSetReady(ds *appsv1.DaemonSet, n int) bool {
	return ds.Status.ObservedGeneration >= ds.Generation && int(ds.Status.DesiredNumberScheduled) == n &&
		int(ds.Status.NumberReady) == n && int(ds.Status.UpdatedNumberScheduled) == n
}

// PodEnded is the agent's containerEnv.afterStop: the replica of a
// data-plane pod that has ended is retired.
func (p *Plane) PodEnded(pod *corev1.Pod) {
	for _, d := range p.Replicas() {
		if d.podUID == pod.UID {
			p.retireReplica(d)
		}
	}
}

// RetireAll retires every replica: the counting proxies go before the
// chart is uninstalled, which removes the pods' directories, where they
// would put HAProxy's sockets back.
func (p *Plane) RetireAll() {
	for _, d := range p.Replicas() {
		p.retireReplica(d)
	}
}

// retireReplica takes a data-plane pod's replica out of the run: its
// proxies' writes are kept in retiredWrites, the proxies closed (HAProxy's
// sockets put back), the lab's view closed.
func (p *Plane) retireReplica(d *Replica) {
	d.mu.Lock()
	p.retireSocks(d, func(*sockcount.Proxy) bool { return true })
	d.mu.Unlock()
	p.DropReplica(d)
	p.cfg.Logf("%s: data-plane pod %s retired (replica %d)", p.cfg.Name, d.Pod(), d.index)
}

// dropAdmin retires d's admin socket proxy and view (d.mu held) before its
// HAProxy starts again; the dead HAProxy's socket file goes too, so that
// the next interposition waits for the new one's.
func (p *Plane) dropAdmin(d *Replica) {
	admin := filepath.Join(d.dir, "admin.sock")
	p.retireSocks(d, func(s *sockcount.Proxy) bool { return s.Path() == admin })
	_ = os.Remove(admin)
}

// retireSocks (d.mu held) takes d's proxies that match out of the run's
// count — their writes stay counted in retiredWrites — and closes them
// (HAProxy's sockets put back), and closes the lab's view of d's HAProxy.
func (p *Plane) retireSocks(d *Replica, match func(*sockcount.Proxy) bool) {
	p.mu.Lock()
	for _, s := range d.socks {
		if !match(s) {
			continue
		}
		p.retiredWrites += int64(s.Counts().Writes)
		if err := s.Close(); err != nil {
			p.cfg.Logf("%s: %v", p.cfg.Name, err)
		}
	}
	p.socks = slices.DeleteFunc(p.socks, func(s *sockcount.Proxy) bool { return match(s) && slices.Contains(d.socks, s) })
	d.socks = slices.DeleteFunc(d.socks, match)
	p.mu.Unlock()
	if d.prov != nil {
		_ = d.prov.Close()
		d.prov = nil
	}
}
