package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/sockcount"
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
func (r *run) fromChart() bool { return r.mode == ModeZerodrop && r.lab.opts.FromChart }

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
			return nil // started again: its proxy is in place
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
		d.prov = prov
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
	for i, h := range r.lab.net.lbs {
		if hostNodeName(i) == pod.Spec.NodeName {
			d := &dpReplica{index: i, gen: 1, host: h, podName: pod.Name, podUID: pod.UID}
			r.dataPlane = append(r.dataPlane, d)
			return d
		}
	}
	return nil
}

// startChartDataPlane installs the chart, waits until its DaemonSet has a
// ready pod on every load-balancer host and the lab views each replica's
// HAProxy, and routes the client to them all (as the operator's router
// daemon would announce a replica once it serves).
func (r *run) startChartDataPlane(ctx context.Context) error {
	if err := r.installChart(ctx); err != nil {
		return err
	}
	n := r.lab.opts.DataPlaneReplicas
	err := waitFor(ctx, 120*time.Second, "the chart's data plane ready", func() (bool, string) {
		ds, err := r.lab.cp.client.AppsV1().DaemonSets(ctrlNamespace).Get(ctx, r.dataPlaneName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !daemonSetReady(ds, n) {
			return false, fmt.Sprintf("%d of %d scheduled, %d ready", ds.Status.CurrentNumberScheduled, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		viewed := 0
		for _, d := range r.replicas() {
			d.mu.Lock()
			if d.prov != nil {
				viewed++
			}
			d.mu.Unlock()
		}
		return viewed == n, fmt.Sprintf("%d of %d replicas viewed", viewed, n)
	})
	if err != nil {
		return err
	}
	reps := r.replicas()
	r.prov = reps[0].prov
	var members []int
	for _, d := range reps {
		members = append(members, d.index)
	}
	return r.lab.net.routeTo(ctx, true, members...)
}

func daemonSetReady(ds *appsv1.DaemonSet, n int) bool {
	return ds.Status.ObservedGeneration >= ds.Generation && int(ds.Status.DesiredNumberScheduled) == n &&
		int(ds.Status.NumberReady) == n && int(ds.Status.UpdatedNumberScheduled) == n
}

// chartPods lists the run's pods of the chart object called name (its
// app.kubernetes.io/name) from the agent's cache.
func (r *run) chartPods(name string) []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{labelAppName: name})
	pods, _ := r.lab.agent.pods.Pods(ctrlNamespace).List(sel)
	return pods
}

// scrapeChartDataPlane reads every running data-plane pod's metrics, keyed
// by pod and container restarts (a restarted process counts from zero).
func (cs *controllers) scrapeChartDataPlane() {
	for _, p := range cs.run.chartPods(cs.run.dataPlaneName()) {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
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
}

// chartRuns says why scenario cannot run with --from-chart (nil: it can):
// kill-mid-plan and lb-replica-restart signal and replace the replica
// processes the lab starts itself (dataplane.go).
func chartRuns(scenario string, fromChart bool) error {
	if fromChart && (scenario == scenarioKillMidPlan || scenario == scenarioLBReplicaRestart) {
		return fmt.Errorf("scenario %s does not run with --from-chart yet: it drives the data-plane replicas the lab starts itself", scenario)
	}
	return nil
}
