package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/ctrlmetrics"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Controller pods: every run's `zerodrop controller` replicas are pods of
// Deployments in ctrlNamespace, labelled with the run, so that the drain
// Service (a real Service with the fixed ClusterIP drainClusterIP, reached
// through kube-proxy) selects the current run's replicas.
const (
	ctrlNamespace = world.ControllerNamespace
	drainService  = "zerodrop-drain"
	labelRun      = world.LabelRun
	ctrlApp       = "zerodrop-controller"
	metricsPort   = world.MetricsPort
	probesPort    = world.ProbesPort
	drainPort     = world.DrainPort
)

// ctrlScrape is the last scrape of one controller pod.
type ctrlScrape struct {
	name   string
	c      ctrlmetrics.Counters
	leader bool
	gone   bool      // the pod was told to stop: no longer a leader candidate
	at     time.Time // of the last scrape that answered
}

// controllers tracks a run's controller pods through their metrics
// endpoints, scraped every 250 ms from the admin namespace and once more
// just before a pod is told to stop; counters add up over every pod the run
// ever had.
type controllers struct {
	run    *run
	client *http.Client

	mu     sync.Mutex
	scrape map[types.UID]*ctrlScrape
}

func newControllers(r *run) *controllers {
	return &controllers{run: r, scrape: map[types.UID]*ctrlScrape{},
		client: &http.Client{Timeout: 2 * time.Second,
			Transport: &http.Transport{DisableKeepAlives: true, DialContext: r.lab.net.Admin.DialContext}}}
}

// upstreamCommand is the lab subcommand a controller pod of the upstream and
// recipe modes runs: the lab's cloud-controller-manager (upstream.Main).
const UpstreamCommand = "upstream-controller"

// args are the mode's controller flags: zerodrop's controller with the
// run's own class and pool, its world's load balancer, its endpoints and
// leader election (the webhook runs in the lab process: see docs/lab.md),
// or in the upstream and recipe modes the upstream service controller in
// its own cloud-controller-manager process (upstream.Main), with that
// component's default lease settings, attached to the run's HAProxy.
func (cs *controllers) args() []string {
	r := cs.run
	kubeconfig, pool := "--kubeconfig="+r.lab.net.Kubeconfig, "--address-pool="+cluster.FrontendPool(r.id)
	if !r.mode.Gated() {
		args := r.world.ControllerArgs([]string{"lab", UpstreamCommand, kubeconfig, pool})
		return append(args, fmt.Sprintf("--metrics-bind-address=:%d", metricsPort),
			"--leader-election-namespace="+ctrlNamespace, "--leader-election-id=cloud-controller-manager-lab-"+strconv.Itoa(r.id))
	}
	args := r.world.ControllerArgs([]string{"controller", kubeconfig, "--load-balancer-class=" + r.class, pool})
	return append(args,
		fmt.Sprintf("--metrics-bind-address=:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=:%d", probesPort),
		fmt.Sprintf("--drain-bind-address=:%d", drainPort),
		"--leader-election-namespace="+ctrlNamespace,
		"--leader-election-id=zerodrop-lab-"+strconv.Itoa(r.id),
	)
}

// deployment is one Deployment of controller replicas running args.
// zerodrop's have deploy/deployment.yaml's readiness probe and preStop
// sleep; the upstream controller's pods have neither (a control plane
// component serves no traffic of its own).
func (cs *controllers) deployment(name string, replicas int32, args []string) *appsv1.Deployment {
	r := cs.run
	labels := map[string]string{"app": ctrlApp, labelRun: strconv.Itoa(r.id), "lab.zerodrop.dev/role": name}
	c := corev1.Container{
		Name:  world.ControllerContainer,
		Image: cluster.ControllerImage,
		Args:  args,
		Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: metricsPort}},
	}
	if r.mode.Gated() {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "probes", ContainerPort: probesPort},
			corev1.ContainerPort{Name: "drain", ContainerPort: drainPort})
		c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 5, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("probes")}}}
		// Let endpoints and kube-proxy forget this replica before it stops
		// taking drain requests (deploy/ does the same).
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
	}
	meta := metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, r.id), Namespace: ctrlNamespace, Labels: labels}
	return deploymentOf(meta, labels, replicas, corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30), Containers: []corev1.Container{c}})
}

// controllerReplicas is how many controller replicas every mode runs:
// zerodrop's two (deploy/), and two of the upstream controller's
// cloud-controller-manager, as a highly available control plane has.
const controllerReplicas = 2

// start creates the mode's controller Deployment.
func (cs *controllers) start(ctx context.Context) error {
	r := cs.run
	name := "zerodrop"
	if !r.mode.Gated() {
		name = "upstream"
	}
	d := cs.deployment(name, controllerReplicas, cs.args())
	if _, err := r.lab.cp.Client.AppsV1().Deployments(ctrlNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("controller deployment %s: %w", d.Name, err)
	}
	return nil
}

// pods lists the run's controller pods from the agent's cache: the
// runner's Deployment's, or the world's (world.ControllerPods).
func (cs *controllers) pods() []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{"app": ctrlApp, labelRun: strconv.Itoa(cs.run.id)})
	if w, ok := cs.run.world.(world.ControllerPods); ok {
		sel = labels.SelectorFromSet(w.ControllerSelector())
	}
	pods, _ := cs.run.lab.agent.Pods.Pods(ctrlNamespace).List(sel)
	return pods
}

// loop scrapes every running controller pod until ctx ends.
func (cs *controllers) loop(ctx context.Context) {
	for traffic.SleepCtx(ctx, 250*time.Millisecond) {
		cs.scrapeDataPlane()
		for _, p := range cs.pods() {
			switch {
			case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
				cs.gone(p.Name)
			case p.Status.PodIP != "" && p.DeletionTimestamp == nil:
				cs.scrapePod(p)
			}
		}
	}
}

// scrapePod reads one pod's metrics; a pod that does not answer keeps its
// last figures.
func (cs *controllers) scrapePod(p *corev1.Pod) { cs.scrapeAt(cs.scrapeKey(p), p.Name, p.Status.PodIP) }

// scrapeKey keys a controller pod's scrapes by process: the lab's kubelet
// replaces a pod of the runner's own Deployment whose process ended, but
// starts a container of a world's pod (the chart's) again in place (the
// same pod), whose new process counts from zero and is a leader candidate
// of its own.
func (cs *controllers) scrapeKey(p *corev1.Pod) types.UID {
	return types.UID(cluster.ProcessKey(p, world.ControllerContainer))
}

// scrapeAt reads the metrics at ip into the figures kept under key.
func (cs *controllers) scrapeAt(key types.UID, name, ip string) {
	c, leader, err := ctrlmetrics.FetchMetrics(cs.client, fmt.Sprintf("http://%s:%d/metrics", ip, metricsPort))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	s := cs.scrape[key]
	if s == nil {
		s = &ctrlScrape{name: name}
		cs.scrape[key] = s
	}
	if err == nil {
		s.c, s.leader, s.at = c, leader, time.Now()
	}
}

// stopping is the agent's call just before a controller pod is told to stop:
// a last scrape, and the pod is no leader candidate any more.
func (cs *controllers) stopping(p *corev1.Pod) {
	if dp := cs.run.dataPlane(); dp != nil {
		if s, ok := dp.PodScrape(p); ok {
			// A data-plane pod: its own keys.
			if s.IP != "" {
				cs.scrapeAt(types.UID(s.Key), s.Name, s.IP)
			}
			return
		}
	}
	if p.Status.PodIP != "" {
		cs.scrapePod(p)
	}
	cs.mu.Lock()
	if s := cs.scrape[cs.scrapeKey(p)]; s != nil {
		s.gone = true
	}
	cs.mu.Unlock()
}

// gone marks the pod named name as no leader candidate any more: the lab
// ended its process.
func (cs *controllers) gone(name string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, s := range cs.scrape {
		if s.name == name {
			s.gone = true
		}
	}
}

// counters returns the figures of every controller pod of the run so far.
func (cs *controllers) counters() ctrlmetrics.Counters {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var c ctrlmetrics.Counters
	for _, s := range cs.scrape {
		c = c.Add(s.c)
	}
	return c
}

// leader is the name of the pod that holds the leader lease, by its last
// scrape ("" when none is known).
func (cs *controllers) leader() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, s := range cs.scrape {
		if s.leader && !s.gone {
			return s.name
		}
	}
	return ""
}

// leaderSince reports whether the pod named name said it held the lease in
// a scrape after t.
func (cs *controllers) leaderSince(name string, t time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, s := range cs.scrape {
		if s.name == name && s.leader && !s.gone && s.at.After(t) {
			return true
		}
	}
	return false
}
