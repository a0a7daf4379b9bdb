package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// The data plane of a run installed from the chart (--from-chart): the
// chart's DaemonSet pods on the load-balancer hosts' Nodes, run by the
// lab's kubelet. The lab only watches: before a pod's haproxy container
// starts, it puts its counting proxy where the master CLI socket goes (the
// image's haproxy wrapper binds HAProxy's at PATH.haproxy); before the
// controller container starts, it waits for HAProxy's admin socket and
// interposes its counting proxy there, and attaches a read-only view
// (views, steady.go) — so every write either container makes is counted at
// HAProxy's sockets, as in the lab's other arrangements.

const labelAppName = "app.kubernetes.io/name"

// fromChart: the run's zerodrop is installed from the chart.
func (r *run) fromChart() bool { return r.mode == report.ModeZerodrop && r.lab.opts.FromChart }

// beforeContainer is the agent's containerEnv.beforeStart.
func (l *lab) beforeContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, hostPath func(string) (string, bool)) error {
	l.curMu.Lock()
	r := l.current
	l.curMu.Unlock()
	if r == nil || !r.fromChart() || pod.Namespace != ctrlNamespace || pod.Labels[labelAppName] != r.dataPlaneName() || len(c.Args) == 0 {
		return nil
	}
	d := r.chartReplica(pod)
	if d == nil {
		return fmt.Errorf("data-plane pod %s is on %s, not a load-balancer host", pod.Name, pod.Spec.NodeName)
	}
	switch c.Args[0] {
	case "haproxy":
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
			r.dropAdmin(d)
			return nil
		}
		master, err := sockcount.Listen(filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.haproxy"))
		if err != nil {
			return err
		}
		d.dir = dir
		d.socks = append(d.socks, master)
		r.addSocks(master)
		return nil
	case "controller":
		sock, ok := hostPath(argValue(c.Args, "--haproxy-socket"))
		if !ok {
			return fmt.Errorf("container %s: --haproxy-socket is on no volume", c.Name)
		}
		d.mu.Lock()
		dir, viewed := d.dir, d.prov != nil
		d.mu.Unlock()
		if viewed {
			return nil
		}
		if err := waitFor(ctx, 60*time.Second, "HAProxy's admin socket in "+pod.Name, func() (bool, string) {
			fi, err := os.Lstat(sock)
			return err == nil && fi.Mode().Type() == os.ModeSocket, "not there yet"
		}); err != nil {
			return err
		}
		admin, err := sockcount.Interpose(sock)
		if err != nil {
			return err
		}
		r.addSocks(admin)
		prov, err := haproxy.New(ctx, haproxy.Options{AdminSocket: sock, MasterSocket: filepath.Join(dir, "master.sock"),
			ConfigFile: filepath.Join(dir, "haproxy.cfg"), Log: logr.Discard()})
		d.mu.Lock()
		d.socks = append(d.socks, admin)
		d.prov, d.viewedAt = prov, time.Now()
		d.mu.Unlock()
		return err
	}
	return nil
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
func (r *run) hostIndex(node string) int {
	for i := range r.lab.net.LBs {
		if cluster.HostNodeName(i) == node {
			return i
		}
	}
	return -1
}

// addSocks records counting proxies for the run's write count.
func (r *run) addSocks(p ...*sockcount.Proxy) {
	r.dpMu.Lock()
	r.socks = append(r.socks, p...)
	r.dpMu.Unlock()
}

// chartReplica returns the replica of the data-plane pod, made on first
// sight (nil when the pod is on no load-balancer host).
func (r *run) chartReplica(pod *corev1.Pod) *dpReplica {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	for _, d := range r.dataPlane {
		if d.podUID == pod.UID {
			return d
		}
	}
	i := r.hostIndex(pod.Spec.NodeName)
	if i < 0 {
		return nil
	}
	d := &dpReplica{index: i, gen: 1, host: r.lab.net.LBs[i], podName: pod.Name, podUID: pod.UID}
	r.dataPlane = append(r.dataPlane, d)
	return d
}

// startChartDataPlane installs the chart, waits until its DaemonSet has a
// ready pod on every load-balancer host and the lab views each replica's
// HAProxy, and routes the client to them all (as the operator's router
// daemon would announce a replica once it serves).
// The router stand-in runs until runCtx ends.
func (r *run) startChartDataPlane(ctx, runCtx context.Context) error {
	if err := r.installChart(ctx); err != nil {
		return err
	}
	n := r.lab.opts.DataPlaneReplicas
	err := waitFor(ctx, 120*time.Second, "the chart's data plane ready", func() (bool, string) {
		ds, err := r.lab.cp.Client.AppsV1().DaemonSets(ctrlNamespace).Get(ctx, r.dataPlaneName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !daemonSetReady(ds, n) {
			return false, fmt.Sprintf("%d of %d scheduled, %d ready", ds.Status.CurrentNumberScheduled, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		serving := len(r.serving())
		return serving == n, fmt.Sprintf("%d of %d replicas serving", serving, n)
	})
	if err != nil {
		return err
	}
	r.prov = r.replicas()[0].prov
	if err := r.setRoutes(ctx, true, r.serving()); err != nil {
		return err
	}
	go r.announceLoop(runCtx)
	return nil
}

// The router stand-in of a data plane installed from the chart (the
// operator's BGP daemon or keepalived): a replica's route is withdrawn when
// its pod starts terminating, withdrawSettle before its containers are told
// to stop (dataPlaneStopping), and announced once its pod is Ready and the
// lab views its HAProxy (announceLoop); a failed node's replica is
// withdrawn by the scenario and not announced again while its node is down.

// setRoutes routes the client to the load-balancer hosts members.
func (r *run) setRoutes(ctx context.Context, fresh bool, members []int) error {
	r.routeMu.Lock()
	defer r.routeMu.Unlock()
	if !fresh && slices.Equal(members, r.routed) {
		return nil
	}
	if err := r.lab.net.RouteTo(ctx, fresh, members...); err != nil {
		return err
	}
	r.mark("client routed to load-balancer hosts %v", members)
	r.routed = slices.Clone(members)
	return nil
}

// serving are the load-balancer hosts whose data-plane pod is Ready, not
// terminating and viewed by the lab, on a node that is up: those a router
// daemon checking the replicas would announce. Ready counts from a
// transition after the view: a failed node's pod keeps the Ready its dead
// kubelet last reported until the node is back and reports again.
func (r *run) serving() []int {
	var out []int
	for _, d := range r.replicas() {
		d.mu.Lock()
		viewed, since := d.prov != nil, d.viewedAt.Truncate(time.Second)
		d.mu.Unlock()
		if !viewed || r.lab.agent.NodeDown(cluster.HostNodeName(d.index)) {
			continue
		}
		pod, err := r.lab.agent.Pods.Pods(ctrlNamespace).Get(d.podName)
		if err != nil || pod.DeletionTimestamp != nil || !readySince(pod, since) {
			continue
		}
		out = append(out, d.index)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// withdraw takes host index out of the client's route: the route goes to
// the other hosts that serve. With none left, the route stays (a nexthop
// group cannot be empty) and the lab says so.
func (r *run) withdraw(ctx context.Context, index int) error {
	members := slices.DeleteFunc(r.serving(), func(i int) bool { return i == index })
	if len(members) == 0 {
		r.lab.logf("%s: no other load-balancer host serves: host %d's route stays", r.name(), index)
		return nil
	}
	return r.setRoutes(ctx, false, members)
}

// dataPlaneStopping is called by the agent when a pod of the run starts
// terminating, before its containers are stopped: a data-plane pod's route
// is withdrawn, and the stop waits withdrawSettle.
func (r *run) dataPlaneStopping(p *corev1.Pod) {
	if !r.fromChart() || p.Labels[labelAppName] != r.dataPlaneName() {
		return
	}
	i := r.hostIndex(p.Spec.NodeName)
	if i < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.mark("%s terminating", p.Name)
	if err := r.withdraw(ctx, i); err != nil {
		r.lab.logf("%s: withdraw %s's route: %v", r.name(), p.Name, err)
	}
	time.Sleep(withdrawSettle)
}

// announceLoop announces the route of every host that serves (serving)
// and is not routed yet, until ctx ends; withdrawals are dataPlaneStopping's
// and the scenario's.
func (r *run) announceLoop(ctx context.Context) {
	for traffic.SleepCtx(ctx, 200*time.Millisecond) {
		r.routeMu.Lock()
		members := slices.Clone(r.routed)
		r.routeMu.Unlock()
		for _, i := range r.serving() {
			if !slices.Contains(members, i) {
				members = append(members, i)
			}
		}
		slices.Sort(members)
		if err := r.setRoutes(ctx, false, members); err != nil && ctx.Err() == nil {
			r.lab.logf("%s: announce: %v", r.name(), err)
		}
	}
}

func daemonSetReady(ds *appsv1.DaemonSet, n int) bool {
	return ds.Status.ObservedGeneration >= ds.Generation && int(ds.Status.DesiredNumberScheduled) == n &&
		int(ds.Status.NumberReady) == n && int(ds.Status.UpdatedNumberScheduled) == n
}

// chartPods lists the run's pods of the chart object called name (its
// app.kubernetes.io/name) from the agent's cache.
func (r *run) chartPods(name string) []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{labelAppName: name})
	pods, _ := r.lab.agent.Pods.Pods(ctrlNamespace).List(sel)
	return pods
}

// scrapeChartDataPlane reads every running data-plane pod's metrics, keyed
// by pod and container restarts (a restarted process counts from zero).
func (cs *controllers) scrapeChartDataPlane() {
	for _, p := range cs.run.chartPods(cs.run.dataPlaneName()) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			cs.scrapeDataPlanePod(p)
		}
	}
}

// scrapeDataPlanePod scrapes one data-plane pod's controller container,
// keyed by pod and restarts: each process's counters once.
func (cs *controllers) scrapeDataPlanePod(p *corev1.Pod) {
	if p.Status.PodIP == "" {
		return
	}
	var restarts int32
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == "controller" {
			restarts = st.RestartCount
		}
	}
	name := fmt.Sprintf("%s/%d", p.Name, restarts)
	cs.scrapeAt(types.UID(fmt.Sprintf("%s/%d", p.UID, restarts)), name, p.Status.PodIP)
}

// chartRuns says why scenario cannot run with --from-chart (nil: it can):
// kill-mid-plan kills the replica processes the lab starts itself
// (dataplane.go).
func ChartRuns(scenario string, fromChart bool) error {
	if fromChart && scenario == report.ScenarioKillMidPlan {
		return fmt.Errorf("scenario %s does not run with --from-chart yet: it drives the data-plane replicas the lab starts itself", scenario)
	}
	return nil
}

// afterChartPod is the agent's containerEnv.afterStop: a data-plane pod of
// the run that has ended is retired.
func (l *lab) afterChartPod(pod *corev1.Pod) {
	l.curMu.Lock()
	r := l.current
	l.curMu.Unlock()
	if r == nil || !r.fromChart() {
		return
	}
	for _, d := range r.replicas() {
		if d.podUID == pod.UID {
			r.retireReplica(d)
		}
	}
}

// retireReplica takes a data-plane pod's replica out of the run: its
// proxies' writes are kept in retiredWrites, the proxies closed (HAProxy's
// sockets put back), the lab's view closed.
func (r *run) retireReplica(d *dpReplica) {
	d.mu.Lock()
	r.retireSocks(d, func(*sockcount.Proxy) bool { return true })
	d.mu.Unlock()
	r.dpMu.Lock()
	r.dataPlane = slices.DeleteFunc(r.dataPlane, func(o *dpReplica) bool { return o == d })
	r.dpMu.Unlock()
	r.lab.logf("%s: data-plane pod %s retired (replica %d)", r.name(), d.pod(r.id), d.index)
}

// dropAdmin retires d's admin socket proxy and view (d.mu held) before its
// HAProxy starts again; the dead HAProxy's socket file goes too, so that
// the next interposition waits for the new one's.
func (r *run) dropAdmin(d *dpReplica) {
	admin := filepath.Join(d.dir, "admin.sock")
	r.retireSocks(d, func(p *sockcount.Proxy) bool { return p.Path() == admin })
	_ = os.Remove(admin)
}

// retireSocks (d.mu held) takes d's proxies that match out of the run's
// count — their writes stay counted in retiredWrites — and closes them
// (HAProxy's sockets put back), and closes the lab's view of d's HAProxy.
func (r *run) retireSocks(d *dpReplica, match func(*sockcount.Proxy) bool) {
	r.dpMu.Lock()
	for _, p := range d.socks {
		if !match(p) {
			continue
		}
		r.retiredWrites += int64(p.Counts().Writes)
		if err := p.Close(); err != nil {
			r.lab.logf("%s: %v", r.name(), err)
		}
	}
	r.socks = slices.DeleteFunc(r.socks, func(p *sockcount.Proxy) bool { return match(p) && slices.Contains(d.socks, p) })
	d.socks = slices.DeleteFunc(d.socks, match)
	r.dpMu.Unlock()
	if d.prov != nil {
		_ = d.prov.Close()
		d.prov = nil
	}
}

// readySince: the pod is Ready, and became so at since or later.
func readySince(pod *corev1.Pod, since time.Time) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && !c.LastTransitionTime.Time.Before(since)
		}
	}
	return false
}
