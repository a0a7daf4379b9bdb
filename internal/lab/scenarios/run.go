package scenarios

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/ctrlmetrics"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/upstream"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Recipe is the published recipe's workload settings (see docs/lab.md).
type Recipe struct {
	PreStopSleep time.Duration // preStop: sleep
	GracePeriod  time.Duration // terminationGracePeriodSeconds
	MinReady     time.Duration // the Deployment's minReadySeconds
}

// DefaultRecipe is the recipe as it is usually published.
var DefaultRecipe = Recipe{PreStopSleep: 30 * time.Second, GracePeriod: 60 * time.Second, MinReady: 30 * time.Second}

// Workload shape, the same in every mode.
const (
	appName     = "web"
	servicePort = 8000
	podPort     = 8080
	replicas    = 3
)

// Backends and traffic policies a run can have.
const (
	BackendIP     = "ip"
	BackendNode   = "node"
	PolicyCluster = "cluster"
	PolicyLocal   = "local"
)

// run is one scenario in one mode, backend and traffic policy: its
// namespace, its HAProxy (in the load balancer's namespace), its controller
// pods and its traffic.
type run struct {
	lab      *lab
	id       int
	scenario string
	mode     report.Mode
	backend  string
	policy   string
	ns       string
	class    string
	dir      string
	prov     *haproxy.Provider
	socks    []*sockcount.Proxy // in front of HAProxy's admin and master sockets
	// upstreamLB is the upstream cloud's name of the run's load balancer
	// (upstream and recipe modes: upstreamBackends reads its rules).
	upstreamLB string
	// dataPlane are the run's data-plane replicas (dataplane.go); prov is
	// then the first one's HAProxy. lb-replica-restart replaces replicas
	// and adds counting proxies while others read: both under dpMu.
	dataPlane []*dpReplica
	dpMu      sync.Mutex
	// chartObjs are the run's install of the chart (chart.go).
	chartObjs []*unstructured.Unstructured
	// retiredWrites are the writes counted by proxies of data-plane pods
	// that are gone (retireReplica), under dpMu.
	retiredWrites int64
	// routeMu guards routed, the load-balancer hosts the client's route
	// has (installed from the chart: the router stand-in's).
	routeMu  sync.Mutex
	routed   []int
	ctrls    *controllers
	addr     string // the load balancer's ingress address
	rec      *traffic.Recorder
	cordoned []string
	// restartWrites are restart-idle's and kill-mid-plan's writes per
	// restart.
	restartWrites []int64
	// replicaFigures are lb-replica-restart's figures by phase.
	replicaFigures *report.ReplicaFigures
	chaos          *report.ChaosFigures // the chaos scenarios' own figures
	// dupSamples counts state samples with a backend doubled (sampleStates).
	dupSamples atomic.Int64
	stop       context.CancelFunc // the controller scrapes

	mu      sync.Mutex
	markers []report.Marker
}

func (r *run) key() string { return r.ns + "/" + appName }
func (r *run) name() string {
	return r.scenario + "/" + r.backend + "/" + r.policy + "/" + string(r.mode)
}

func (r *run) mark(format string, args ...any) {
	label := fmt.Sprintf(format, args...)
	r.mu.Lock()
	at := time.Duration(0)
	if r.rec != nil {
		at = time.Since(r.rec.Start)
	}
	r.markers = append(r.markers, report.Marker{At: at, Label: label})
	r.mu.Unlock()
	r.lab.logf("%s: %s at %.1fs", r.name(), label, at.Seconds())
}

// setup creates the namespace, HAProxy, the controllers and the workload, and
// waits until traffic flows to every replica.
func (r *run) setup(ctx context.Context, want int32) error {
	cs := r.lab.cp.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
	if r.mode == report.ModeZerodrop {
		ns.Labels = map[string]string{webhook.LabelInject: webhook.InjectEnabled}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	sctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	if r.fromChart() {
		if err := r.startChartDataPlane(ctx, sctx); err != nil {
			return err
		}
	} else if r.dataPlaneEnabled() {
		if err := r.startDataPlane(ctx); err != nil {
			return err
		}
	} else {
		if err := writeHAProxyWrapper(r.haproxyBinary(), r.lab.net.LB.Name); err != nil {
			return err
		}
		prov, socks, err := startHAProxy(ctx, r.dir, r.haproxyBinary())
		r.addSocks(socks...)
		if err != nil {
			return err
		}
		r.prov = prov
		if r.lab.opts.DataPlaneReplicas >= 2 {
			// One HAProxy, on the first load balancer's host: the client
			// sends there only.
			if err := r.lab.net.RouteTo(ctx, true, 0); err != nil {
				return err
			}
		}
	}
	r.ctrls = newControllers(r)
	if r.mode == report.ModeZerodrop && !r.fromChart() {
		if err := r.lab.selectDrainReplicas(ctx, r.id); err != nil {
			return err
		}
	}
	if !r.fromChart() {
		if err := r.ctrls.start(ctx); err != nil {
			return err
		}
	}
	go r.ctrls.loop(sctx)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     ptr.To(r.class),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Selector:              map[string]string{"app": appName},
			Ports: []corev1.ServicePort{{Name: "http", Port: servicePort, TargetPort: intstr.FromString("http"),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if r.policy == PolicyLocal {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if r.backend == BackendNode {
		svc.Annotations = map[string]string{model.AnnotationBackendMode: string(model.NodeMode)}
	}
	if r.mode.NodeBacked() {
		svc.Spec.LoadBalancerClass = nil
	}
	created, err := cs.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	r.upstreamLB = upstream.LoadBalancerName(created)
	if r.mode == report.ModeZerodrop || r.mode == report.ModeRecipe {
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": appName}},
			},
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(r.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pdb: %w", err)
		}
	}
	if r.fromChart() {
		if err := r.waitChartWebhook(ctx); err != nil {
			return err
		}
	}
	if _, err := cs.AppsV1().Deployments(r.ns).Create(ctx, r.deployment(want), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("deployment: %w", err)
	}
	return r.waitSteady(ctx, want, r.steadyTimeout(want))
}

// steadyTimeout bounds how long a workload of n replicas may take to be
// steady after a disruption: 120 s, and with the recipe each of the n pods
// replaced one at a time (minReadySeconds and a readiness probe period on
// top of a start) plus one grace period for the last old pod.
func (r *run) steadyTimeout(n int32) time.Duration {
	d := 120 * time.Second
	if r.mode == report.ModeRecipe {
		rc := r.lab.opts.Recipe
		d += time.Duration(n)*(rc.MinReady+10*time.Second) + rc.GracePeriod
	}
	return d
}

// deployment is a typical web Deployment: a readiness probe with the
// Kubernetes defaults (period 10 s, failure threshold 3) and the default
// grace period of 30 s. zerodrop mode adds the rollout settings zerodrop
// check asks for (maxUnavailable 0, maxSurge 1); the webhook adds the gate and
// the hook at admission. Upstream keeps the Deployment defaults (25 %/25 %).
// The recipe adds its preStop sleep, grace period and minReadySeconds to
// zerodrop's rollout settings.
func (r *run) deployment(n int32) *appsv1.Deployment {
	labels := map[string]string{"app": appName}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "lab/web:1",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: podPort, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
						}},
					}},
				},
			},
		},
	}
	if r.lab.opts.AppExitOnSIGTERM {
		d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: traffic.AppSigtermEnv, Value: traffic.AppSigtermExit}}
	}
	if r.mode == report.ModeZerodrop || r.mode == report.ModeRecipe {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}}
	}
	if r.mode == report.ModeRecipe {
		rc := r.lab.opts.Recipe
		spec := &d.Spec.Template.Spec
		spec.TerminationGracePeriodSeconds = ptr.To(int64(rc.GracePeriod / time.Second))
		spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: int64(rc.PreStopSleep / time.Second)}}}
		d.Spec.MinReadySeconds = int32(rc.MinReady / time.Second)
	}
	return d
}

// counters sums the provider figures of every controller pod of the run.
func (r *run) counters() ctrlmetrics.Counters { return r.ctrls.counters() }

// landed is the HAProxy runtime API writes (commands and reloads) counted at
// its sockets, and an error when a socket's proxy was bypassed.
func (r *run) landed() (int64, error) {
	var n int64
	r.dpMu.Lock()
	socks := slices.Clone(r.socks)
	n = r.retiredWrites
	r.dpMu.Unlock()
	for _, p := range socks {
		if !p.InPlace() {
			return 0, fmt.Errorf("HAProxy's socket %s was replaced: writes after that were not counted", p.Path())
		}
		n += int64(p.Counts().Writes)
	}
	return n, nil
}

// restartController deletes the controller pod that writes (the leader), as
// a rolling update of the controller or a deleted pod does: its ReplicaSet
// starts a replacement at once, and the old pod stops (zerodrop's with its
// preStop sleep and SIGTERM). It returns when a replacement is ready.
func (r *run) restartController(ctx context.Context) error {
	target, err := r.waitLeader(ctx, "")
	if err != nil {
		return err
	}
	r.mark("restart %s", shortPod(target))
	if err := r.lab.cp.Client.CoreV1().Pods(ctrlNamespace).Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("restart %s: %w", target, err)
	}
	return r.waitControllersReady(ctx, target)
}

// waitLeader waits for a controller pod other than not that reports the
// leader lease (zerodrop: after a restart the lease moves once the old
// leader has stopped; the upstream controller's once the lease expired).
func (r *run) waitLeader(ctx context.Context, not string) (string, error) {
	target := ""
	err := waitFor(ctx, 60*time.Second, "a controller holding the leader lease", func() (bool, string) {
		target = r.ctrls.leader()
		return target != "" && target != not, "no replica reports leader_election_master_status 1"
	})
	return target, err
}

// waitControllersReady waits until the mode's replicas, old excluded, are
// ready.
func (r *run) waitControllersReady(ctx context.Context, old string) error {
	return waitFor(ctx, 60*time.Second, "a replacement controller pod ready", func() (bool, string) {
		ready := 0
		for _, p := range r.ctrls.pods() {
			if p.Name != old && p.DeletionTimestamp == nil && cluster.ConditionStatus(p, corev1.PodReady) == corev1.ConditionTrue {
				ready++
			}
		}
		return ready >= controllerReplicas, fmt.Sprintf("%d ready controller pods, want %d", ready, controllerReplicas)
	})
}

// podNodes counts the nodes the run's pods run on.
func (r *run) podNodes(ctx context.Context) (int, error) {
	nodes, err := r.podNodeNames(ctx)
	return len(nodes), err
}

// podNodeNames lists, sorted, the nodes the run's pods that are not
// terminating run on.
func (r *run) podNodeNames(ctx context.Context) ([]string, error) {
	pods, err := r.lab.cp.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + appName})
	if err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			nodes[p.Spec.NodeName] = true
		}
	}
	out := make([]string, 0, len(nodes))
	for n := range nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// drainReachable connects to the drain Service's ClusterIP from every node.
func (r *run) drainReachable(ctx context.Context) error {
	addr := net.JoinHostPort(cluster.DrainClusterIP, strconv.Itoa(drainPort))
	for _, n := range r.lab.net.Net.Nodes {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := n.DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			return fmt.Errorf("drain Service from %s: %w", cluster.NodeName(n.Index), err)
		}
		c.Close()
	}
	return nil
}

// teardown stops the run's controller pods and HAProxy and ends its pods.
func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if r.ctrls != nil {
		_ = r.lab.cp.Client.AppsV1().Deployments(ctrlNamespace).DeleteCollection(ctx, bg,
			metav1.ListOptions{LabelSelector: labelRun + "=" + strconv.Itoa(r.id)})
		r.lab.agent.Abandon(func(p *corev1.Pod) bool {
			return p.Namespace == ctrlNamespace && p.Labels[labelRun] == strconv.Itoa(r.id)
		})
	}
	if r.stop != nil {
		r.stop()
	}
	r.stopDataPlane()
	if r.prov != nil && !r.dataPlaneEnabled() {
		_ = r.stopHAProxy(r.prov, r.dir)
	}
	for _, p := range r.socks {
		if err := p.Close(); err != nil {
			r.lab.logf("%s: %v", r.name(), err)
		}
	}
	r.lab.agent.Abandon(func(p *corev1.Pod) bool { return p.Namespace == r.ns })
	_ = r.lab.cp.Client.AppsV1().Deployments(r.ns).Delete(ctx, appName, bg)
	for _, n := range r.cordoned {
		_ = r.lab.setUnschedulable(ctx, n, false)
	}
}

// waitFor polls cond every 200 ms until it holds, timeout passes or ctx ends.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return nil
		}
		if msg != "" {
			last = msg
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %s: %s", what, timeout, last)
		}
		if !traffic.SleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		}
	}
}
