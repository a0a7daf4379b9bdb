package scenarios

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios/dataplane"
)

// A run's HAProxy data plane of replicas (--data-plane-replicas N, zerodrop
// mode) is package dataplane's: the lab's own arrangement or, with
// --from-chart, the chart's DaemonSet. What is here is the run's side of
// it: when a run has one, how it starts and stops with the run, and the
// controllers' scrapes of its replicas.

// dataPlaneEnabled: the run has a data plane of replicas.
func (r *run) dataPlaneEnabled() bool {
	return r.mode == report.ModeZerodrop && r.lab.opts.DataPlaneReplicas >= 2
}

// fromChart: the run's zerodrop is installed from the chart.
func (r *run) fromChart() bool { return r.mode == report.ModeZerodrop && r.lab.opts.FromChart }

// newDataPlane is the run's data plane, made with the run (before its
// setup: a teardown after a failed setup routes the client back).
func (r *run) newDataPlane() *dataplane.Plane {
	l := r.lab
	return dataplane.New(dataplane.Config{
		Client: l.cp.Client, REST: l.cp.Config, Net: l.net, Agent: l.agent, Token: l.serviceAccountToken,
		Executable: l.opts.Executable, LogDir: l.dir, Dir: r.dir, Namespace: ctrlNamespace,
		RunID: r.id, Class: r.class, Replicas: l.opts.DataPlaneReplicas,
		FromChart: r.fromChart(), DaemonSet: r.dataPlaneName(),
		MetricsPort: metricsPort, ProbesPort: probesPort,
		Name: r.name(), Logf: l.logf, Mark: r.mark, StopHAProxy: r.stopHAProxy,
	})
}

// replicas are the run's data-plane replicas now (none without a data
// plane).
func (r *run) replicas() []*dataplane.Replica {
	if r.dp == nil {
		return nil
	}
	return r.dp.Replicas()
}

// startChartDataPlane installs the chart and starts its data plane (see
// dataplane.Plane.StartChart); the router stand-in runs until runCtx ends.
func (r *run) startChartDataPlane(ctx, runCtx context.Context) error {
	if err := r.installChart(ctx); err != nil {
		return err
	}
	if err := r.dp.StartChart(ctx, runCtx); err != nil {
		return err
	}
	r.prov = r.replicas()[0].Provider()
	return nil
}

// stopDataPlane ends every replica (installed from the chart: the chart
// uninstalled) and routes the client to the first load balancer only.
func (r *run) stopDataPlane() {
	if r.dp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if r.fromChart() {
		r.dp.RetireAll()
		if err := r.uninstallChart(ctx, 75*time.Second); err != nil {
			r.lab.logf("%s: uninstall the chart: %v", r.name(), err)
		}
	}
	r.dp.Stop(ctx)
}

// dataPlaneStopping is the agent's OnStop for a pod of the run (see
// dataplane.Plane.Stopping).
func (r *run) dataPlaneStopping(p *corev1.Pod) {
	if r.dp != nil {
		r.dp.Stopping(p)
	}
}

// dataPlaneSessions are the connections each replica's HAProxy accepted
// (see dataplane.Plane.Sessions); none without a data plane.
func (r *run) dataPlaneSessions() []int64 {
	if r.dp == nil {
		return nil
	}
	return r.dp.Sessions()
}

// beforeContainer is the agent's containerEnv.beforeStart: the current
// run's chart data plane watches its pods' containers start.
func (l *lab) beforeContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, hostPath func(string) (string, bool)) error {
	l.curMu.Lock()
	r := l.current
	l.curMu.Unlock()
	if r == nil || !r.fromChart() {
		return nil
	}
	return r.dp.BeforeContainer(ctx, pod, c, hostPath)
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
	r.dp.PodEnded(pod)
}

// scrapeDataPlane reads every running replica process's metrics (writes
// and conflicts it reports itself), keyed by process.
func (cs *controllers) scrapeDataPlane() {
	for _, d := range cs.run.replicas() {
		p, n := d.ProcessRun()
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			continue
		default:
		}
		name := fmt.Sprintf("%s/%d", d.Pod(), n)
		cs.scrapeAt(types.UID("process:"+name), name, d.Host().IP.String())
	}
}

// chartPods lists the run's pods of the chart object called name (its
// app.kubernetes.io/name) from the agent's cache.
func (r *run) chartPods(name string) []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{dataplane.LabelAppName: name})
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
	restarts := restartCount(p, chartContainer)
	name := fmt.Sprintf("%s/%d", p.Name, restarts)
	cs.scrapeAt(types.UID(fmt.Sprintf("%s/%d", p.UID, restarts)), name, p.Status.PodIP)
}

// maxDataPlaneReplicas bounds --data-plane-replicas.
const MaxDataPlaneReplicas = 4
