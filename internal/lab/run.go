package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Mode is how the load balancer is run.
type Mode string

// The modes.
const (
	// ModeZerodrop runs zerodrop as shipped: two controller replicas with
	// leader election (deploy/deployment.yaml), defaults, and pods with the
	// readiness gate and drain hook from the real webhook, a PDB and
	// maxUnavailable 0.
	ModeZerodrop Mode = "zerodrop"
	// ModeBaseline switches on upstream-like behaviour by configuration
	// only: --sync=full, --immediate-removal, --readiness-gate=false, an
	// independent second writer (--leader-elect=false) on the same HAProxy,
	// and pods without gates or hooks.
	ModeBaseline Mode = "baseline"
)

// Workload shape, the same in both modes.
const (
	appName     = "web"
	servicePort = 8000
	podPort     = 8080
	replicas    = 3
)

// marker is an event on a scenario's timeline.
type marker struct {
	At    time.Duration `json:"at"`
	Label string        `json:"label"`
}

// run is one scenario in one mode: its namespace, its HAProxy, its
// controllers and its traffic.
type run struct {
	lab      *lab
	scenario string
	mode     Mode
	ns       string
	class    string
	dir      string
	prov     *haproxy.Provider
	ctrls    []*ctrlProc
	addr     string // the load balancer's ingress address
	rec      *recorder
	cordoned []string

	mu      sync.Mutex
	markers []marker
}

func (r *run) key() string  { return r.ns + "/" + appName }
func (r *run) name() string { return r.scenario + "/" + string(r.mode) }

func (r *run) mark(format string, args ...any) {
	label := fmt.Sprintf(format, args...)
	r.mu.Lock()
	at := time.Duration(0)
	if r.rec != nil {
		at = time.Since(r.rec.start)
	}
	r.markers = append(r.markers, marker{At: at, Label: label})
	r.mu.Unlock()
	r.lab.logf("%s: %s at %.1fs", r.name(), label, at.Seconds())
}

// setup creates the namespace, HAProxy, the controllers and the workload, and
// waits until traffic flows to every replica.
func (r *run) setup(ctx context.Context, want int32) error {
	cs := r.lab.cp.client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
	if r.mode == ModeZerodrop {
		ns.Labels = map[string]string{webhook.LabelInject: webhook.InjectEnabled}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	prov, err := haproxy.New(ctx, haproxy.Options{Dir: r.dir, StopOnClose: true, Log: logr.Discard()})
	if err != nil {
		return err
	}
	r.prov = prov
	if err := r.startControllers(ctx); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To(r.class),
			Selector:          map[string]string{"app": appName},
			Ports: []corev1.ServicePort{{Name: "http", Port: servicePort, TargetPort: intstr.FromString("http"),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := cs.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if r.mode == ModeZerodrop {
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
	if _, err := cs.AppsV1().Deployments(r.ns).Create(ctx, r.deployment(want), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("deployment: %w", err)
	}
	return r.waitSteady(ctx, want, 120*time.Second)
}

// deployment is a typical web Deployment: a readiness probe with the
// Kubernetes defaults (period 10 s, failure threshold 3) and the default
// grace period of 30 s. zerodrop mode adds the rollout settings zerodrop
// check asks for (maxUnavailable 0, maxSurge 1); the webhook adds the gate and
// the hook at admission. Baseline keeps the Deployment defaults (25 %/25 %).
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
	if r.mode == ModeZerodrop {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}}
	}
	return d
}

// startControllers starts the mode's controller processes.
func (r *run) startControllers(ctx context.Context) error {
	common := []string{
		"--kubeconfig=" + r.lab.cp.kubeconfig,
		"--load-balancer-class=" + r.class,
		"--address-pool=" + fmt.Sprintf("127.0.%d.0/24", 100+r.lab.runs%100),
		"--backend-address-map=" + addressMap,
		"--haproxy-dir=" + r.dir,
		"--health-probe-bind-address=0",
		"--leader-election-namespace=kube-system",
		"--leader-election-id=zerodrop-lab-" + strconv.Itoa(r.lab.runs),
	}
	add := func(name string, drain bool, extra ...string) error {
		metrics, err := freeAddr()
		if err != nil {
			return err
		}
		p := &ctrlProc{name: name, exe: r.lab.opts.Executable, metricsAddr: metrics,
			logPath: filepath.Join(r.lab.dir, fmt.Sprintf("%s-%s-%s.log", r.scenario, r.mode, name))}
		args := append(append([]string{}, common...), "--metrics-bind-address="+metrics)
		if drain {
			if p.drainAddr, err = freeAddr(); err != nil {
				return err
			}
			args = append(args, "--drain-bind-address="+p.drainAddr)
		} else {
			args = append(args, "--drain-bind-address=0")
		}
		p.args = append(args, extra...)
		r.ctrls = append(r.ctrls, p)
		return p.start(ctx)
	}
	switch r.mode {
	case ModeZerodrop:
		for _, name := range []string{"replica-a", "replica-b"} {
			if err := add(name, true); err != nil {
				return err
			}
		}
		r.updateDrainService()
	case ModeBaseline:
		upstream := []string{"--sync=full", "--immediate-removal", "--readiness-gate=false"}
		if err := add("controller", false, upstream...); err != nil {
			return err
		}
		attach := append(upstream, "--leader-elect=false",
			"--haproxy-socket="+filepath.Join(r.dir, "admin.sock"),
			"--haproxy-master-socket="+filepath.Join(r.dir, "master.sock"),
			"--haproxy-config="+filepath.Join(r.dir, "haproxy.cfg"))
		if err := add("second-writer", false, attach...); err != nil {
			return err
		}
	}
	return nil
}

// updateDrainService points the drain Service at the running replicas,
// but for those being stopped.
func (r *run) updateDrainService(stopping ...*ctrlProc) {
	var addrs []string
	for _, p := range r.ctrls {
		if p.drainAddr != "" && p.running() && !slices.Contains(stopping, p) {
			addrs = append(addrs, p.drainAddr)
		}
	}
	r.lab.drain.setBackends(addrs)
}

// counters sums the provider figures of every controller of the run.
func (r *run) counters() counters {
	var c counters
	for _, p := range r.ctrls {
		c = c.add(p.counters())
	}
	return c
}

// restartController stops the controller that writes (zerodrop: the leader;
// baseline: the leader-elected controller, while the second writer goes on)
// with SIGTERM, as a rolling update of the controller or a deleted pod does,
// and starts it again after down (a replacement pod starting).
func (r *run) restartController(ctx context.Context, down time.Duration) error {
	target := r.ctrls[0]
	if r.mode == ModeZerodrop {
		for _, p := range r.ctrls {
			if p.isLeader() {
				target = p
			}
		}
	}
	r.mark("restart %s", target.name)
	// A stopping replica's pod turns unready: no new drain calls reach it.
	r.updateDrainService(target)
	target.replace(syscall.SIGTERM)
	if !sleepCtx(ctx, down) {
		return ctx.Err()
	}
	r.mark("%s started", target.name)
	if err := target.start(ctx); err != nil {
		return err
	}
	r.updateDrainService()
	return nil
}

// waitSteady waits until the Deployment has want ready, updated replicas and
// no others, no pod of the namespace is terminating, HAProxy has exactly
// those backends, active, and requests through the load balancer succeed.
func (r *run) waitSteady(ctx context.Context, want int32, timeout time.Duration) error {
	return waitFor(ctx, timeout, "steady state", func() (bool, string) {
		if err := r.lab.cp.kcmAlive(); err != nil {
			return false, err.Error()
		}
		d, err := r.lab.cp.client.AppsV1().Deployments(r.ns).Get(ctx, appName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := d.Status
		if d.Status.ObservedGeneration < d.Generation || st.Replicas != want || st.UpdatedReplicas != want ||
			st.ReadyReplicas != want || st.AvailableReplicas != want {
			return false, fmt.Sprintf("deployment replicas=%d updated=%d ready=%d available=%d, want %d",
				st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, want)
		}
		if running, terminating := r.lab.agent.counts(r.ns); running != int(want) || terminating != 0 {
			return false, fmt.Sprintf("pods running=%d terminating=%d", running, terminating)
		}
		if r.addr == "" {
			svc, err := r.lab.cp.client.CoreV1().Services(r.ns).Get(ctx, appName, metav1.GetOptions{})
			if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
				return false, "no ingress address yet"
			}
			r.addr = net.JoinHostPort(svc.Status.LoadBalancer.Ingress[0].IP, strconv.Itoa(servicePort))
		}
		bs, err := r.prov.Backends(ctx, r.key())
		if err != nil {
			return false, err.Error()
		}
		active := 0
		for _, b := range bs {
			if b.State != model.Active {
				return false, fmt.Sprintf("backend %s:%d is %s", b.Address, b.Port, b.State)
			}
			active++
		}
		if active != int(want) {
			return false, fmt.Sprintf("HAProxy has %d backends, want %d", active, want)
		}
		if r.rec == nil {
			client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := 0; i < 2*int(want); i++ {
				if err := get(client, "http://"+r.addr+"/"); err != nil {
					return false, "request through the load balancer: " + err.Error()
				}
			}
		}
		return true, ""
	})
}

// teardown stops the run's controllers and HAProxy and ends its pods.
func (r *run) teardown() {
	r.updateDrainService(r.ctrls...)
	for _, p := range r.ctrls {
		p.stop(syscall.SIGTERM)
	}
	if r.prov != nil {
		_ = r.prov.Close()
	}
	r.lab.agent.abandon(r.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.lab.cp.client.AppsV1().Deployments(r.ns).Delete(ctx, appName, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
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
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		}
	}
}
