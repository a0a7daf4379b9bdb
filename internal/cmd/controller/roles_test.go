package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const dataPlaneSelector = "app.kubernetes.io/component=data-plane"

// process is one `zerodrop controller` run in the test, stopped like a
// killed process: its context cancelled (an owned HAProxy keeps running).
type process struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func runProcess(t *testing.T, cfg Config) *process {
	t.Helper()
	p := &process{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	cfg.Registerer = p.reg
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.done <- RunConfig(ctx, cfg) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
		p.done <- nil // stopped; a second stop returns at once
	case <-time.After(30 * time.Second):
		t.Error("controller process did not stop")
	}
}

func baseConfig(restCfg *rest.Config) Config {
	return Config{
		RESTConfig:      restCfg,
		Provider:        "haproxy",
		Sync:            "incremental",
		Workers:         2,
		AddressPool:     "127.0.104.0/24",
		AddressMap:      "198.18.0.0/15=127.18.0.0/15",
		ResyncPeriod:    time.Hour,
		MetricsAddr:     "0",
		ProbeAddr:       "0",
		DrainAddr:       "0",
		LeaderNamespace: "kube-system",
		LeaderID:        "zerodrop-roles-test",
		LeaseDuration:   4 * time.Second,
		RenewDeadline:   3 * time.Second,
		RetryPeriod:     500 * time.Millisecond,
	}
}

// dataPlaneServiceAccount is the replicas' ServiceAccount in the tests.
const dataPlaneServiceAccount = "zerodrop-data-plane"

// dataPlaneReplica runs the data-plane replica of pod kube-system/podName:
// its own HAProxy in dir, its state endpoint at addr, authenticated as the
// pod (a token bound to it, as the kubelet's), so that it can obtain its
// state endpoint certificate.
func dataPlaneReplica(t *testing.T, restCfg *rest.Config, c client.Client, podName, dir, addr string) *process {
	t.Helper()
	return runProcess(t, dataPlaneConfig(t, restCfg, c, podName, dir, addr))
}

// dataPlaneConfig is dataPlaneReplica's configuration.
func dataPlaneConfig(t *testing.T, restCfg *rest.Config, c client.Client, podName, dir, addr string) Config {
	t.Helper()
	var pod corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: podName}, &pod); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(testutil.PodConfig(t, restCfg, &pod))
	cfg.HAProxy = haproxy.Options{Dir: dir}
	cfg.DataPlane = RoleConfig{Role: "data-plane", StateAddr: addr,
		PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: string(pod.UID)}
	return cfg
}

// replicaPod is the pod the control role finds a replica by: running at ip,
// as the replicas' ServiceAccount.
func replicaPod(t *testing.T, restCfg *rest.Config, c client.Client, name, ip string) {
	t.Helper()
	replicaPodOn(t, restCfg, c, name, "node-"+name, ip)
}

// replicaPodOn is replicaPod on node.
func replicaPodOn(t *testing.T, restCfg *rest.Config, c client.Client, name, node, ip string) {
	t.Helper()
	ctx := context.Background()
	testutil.AdminServiceAccount(t, restCfg, "kube-system", dataPlaneServiceAccount)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name,
			Labels: map[string]string{"app.kubernetes.io/component": "data-plane"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: dataPlaneServiceAccount,
			Containers: []corev1.Container{{Name: "haproxy", Image: "haproxy"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// reconciles sums zerodrop_reconcile_total: only a leader reconciles.
func reconciles(t *testing.T, reg *prometheus.Registry) float64 {
	return counterSum(t, reg, "zerodrop_reconcile_total")
}

// TestDataPlaneReplicas is issue 17's integration test of the roles: two
// data-plane replicas (each a real HAProxy written only by its own
// `zerodrop controller --role data-plane`) and two control replicas (one
// elected). The control leader gives the Service its address (ipMode Proxy)
// and turns Ready only when both replicas serve it; a replica's process
// restarted with nothing changed writes nothing. Then one replica's process
// is killed while its HAProxy runs, and a pod is deleted: the drain call,
// sent to the control replica that is not the leader, is held while that
// replica still has the pod's backend active — though the other has drained
// it — and answers "drained" only once the replica is back and has drained it
// too. Last, the Service is deleted with a replica's process stopped: its
// finalizer stays until that replica, back, has removed the listener.
func TestDataPlaneReplicas(t *testing.T) {
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	ctx := context.Background()
	const ns, name, podIP = "default", "web", "198.18.64.1"

	statePort := testutil.FreePort(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	addrs := []string{"127.0.93.1", "127.0.93.2"}
	for _, d := range dirs {
		t.Cleanup(func() { testutil.StopHAProxy(t, d) })
	}
	replicaPod(t, restCfg, c, "dp-0", addrs[0])
	replicaPod(t, restCfg, c, "dp-1", addrs[1])
	state := func(i int) string { return net.JoinHostPort(addrs[i], strconv.Itoa(statePort)) }

	var ctl []*process
	drainURLs := []string{}
	for range 2 {
		cfg := baseConfig(restCfg)
		cfg.LeaderElect = true
		cfg.ReadinessGate = true
		port := testutil.FreePort(t)
		cfg.DrainAddr = "127.0.0.1:" + strconv.Itoa(port)
		drainURLs = append(drainURLs, "http://"+cfg.DrainAddr+drain.Path)
		cfg.DataPlane = RoleConfig{Role: "control", Namespace: "kube-system", Selector: dataPlaneSelector, StatePort: statePort}
		ctl = append(ctl, runProcess(t, cfg))
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-a", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: "node-1", TerminationGracePeriodSeconds: ptr.To(int64(120)),
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.LBService(ns, name, "zerodrop.dev/haproxy", 80, 8080)); err != nil {
		t.Fatal(err)
	}
	sl := testutil.Slice(ns, name, 8080, podIP)
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-a"}
	if err := c.Create(ctx, sl); err != nil {
		t.Fatal(err)
	}

	// The leader gives the Service its address; with no replica's process
	// answering yet, it is not Ready.
	var svc corev1.Service
	testutil.Eventually(t, 60*time.Second, "an address, Ready False", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)
		return len(svc.Status.LoadBalancer.Ingress) == 1 && ready != nil && ready.Status == metav1.ConditionFalse &&
			ready.Reason == service.ReasonDataPlanePending, fmt.Sprintf("ingress=%v ready=%+v", svc.Status.LoadBalancer.Ingress, ready)
	})
	dp := []*process{dataPlaneReplica(t, restCfg, c, "dp-0", dirs[0], state(0)), dataPlaneReplica(t, restCfg, c, "dp-1", dirs[1], state(1))}

	// Both replicas serve the Service at the address the leader gave it,
	// and only then is it Ready.
	obs := make([]*haproxy.Provider, 2)
	for i, d := range dirs {
		p, err := haproxy.New(ctx, haproxy.Options{Dir: d, Log: testr.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		obs[i] = p
	}
	key := ns + "/" + name
	// backendState is the listener's address and the pod's backend's state
	// on replica i ("removed": the listener has no backend, after a drain).
	backendState := func(i int) (string, model.BackendState) {
		lb, err := obs[i].Observe(ctx, key)
		if err != nil || lb == nil || len(lb.Listeners) != 1 {
			return "", ""
		}
		l := lb.Listeners[0]
		if len(l.Backends) == 0 {
			return l.Address, "removed"
		}
		return l.Address, l.Backends[0].State
	}
	testutil.Eventually(t, 60*time.Second, "the Service Ready, served by both replicas", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionTrue, fmt.Sprintf("ready=%+v", ready)
	})
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) != 1 || ing[0].IPMode == nil || *ing[0].IPMode != corev1.LoadBalancerIPModeProxy {
		t.Fatalf("ingress %+v, want one address with ipMode Proxy", ing)
	}
	// The guarded listeners report what they closed: the replicas' state
	// endpoints, and the control replicas' drain endpoints.
	for i, p := range dp {
		guardSeries(t, p.reg, "state", fmt.Sprintf("data-plane replica %d", i))
	}
	for i, p := range ctl {
		guardSeries(t, p.reg, "drain", fmt.Sprintf("control replica %d", i))
	}
	for i := range dirs {
		if a, st := backendState(i); a != ing[0].IP || st != model.Active {
			t.Fatalf("replica %d: listener at %q, backend %q; want %s, active", i, a, st, ing[0].IP)
		}
	}
	// The data-plane replicas write nothing to Kubernetes: no finalizer
	// race, one writer of the Services.
	if reconciles(t, ctl[0].reg) == 0 && reconciles(t, ctl[1].reg) == 0 {
		t.Fatal("no control replica reconciled")
	}
	other := 1
	if reconciles(t, ctl[0].reg) == 0 {
		other = 0
	}
	if reconciles(t, ctl[other].reg) != 0 {
		t.Fatal("both control replicas reconcile: two writers")
	}

	// A replica's zerodrop process restarted with nothing changed writes
	// nothing to its HAProxy.
	dp[0].stop(t)
	dp[0] = dataPlaneReplica(t, restCfg, c, "dp-0", dirs[0], state(0))
	testutil.Eventually(t, 60*time.Second, "the restarted replica to verify its load balancer", func() (bool, string) {
		n := reconciles(t, dp[0].reg)
		return n > 0, fmt.Sprintf("reconciles=%v", n)
	})
	if w := providerWrites(t, dp[0].reg); w != 0 {
		t.Fatalf("restarted data-plane replica wrote %v times with nothing changed", w)
	}

	// Replica 1's process dies; its HAProxy runs on, still sending to the pod.
	dp[1].stop(t)
	if err := c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sl), sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if err := c.Update(ctx, sl); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		result string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		hc := &http.Client{Timeout: 150 * time.Second}
		resp, err := hc.Get(drainURLs[other] + "?pod=" + ns + "/web-a")
		if err != nil {
			answered <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- answer{result: resp.Header.Get(drain.ResultHeader)}
	}()
	// With no connections a draining backend goes at once.
	testutil.Eventually(t, 60*time.Second, "replica 0 to drain the pod", func() (bool, string) {
		_, st := backendState(0)
		return st == model.Draining || st == "removed", fmt.Sprintf("state=%q", st)
	})
	// Replica 1 still sends the pod new connections: the call must wait.
	// (Bounded by the pod's grace period, 120 s; 5 s is many of the drain
	// handler's polls.)
	select {
	case a := <-answered:
		t.Fatalf("the drain call answered %q (%v) while replica 1's HAProxy has the pod active", a.result, a.err)
	case <-time.After(5 * time.Second):
	}
	if _, st := backendState(1); st != model.Active {
		t.Fatalf("replica 1's backend is %q with its process stopped; want active", st)
	}
	dp[1] = dataPlaneReplica(t, restCfg, c, "dp-1", dirs[1], state(1))
	select {
	case a := <-answered:
		if a.err != nil || a.result != "drained" {
			t.Fatalf("drain call: %q, %v; want drained", a.result, a.err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the drain call did not answer after replica 1 came back")
	}
	for i := range dirs {
		if _, st := backendState(i); st == model.Active {
			t.Fatalf("drain answered with replica %d's backend still active", i)
		}
	}

	// A deleted Service keeps its finalizer while a replica still has its
	// listener (here: one whose process is stopped), and goes once none has.
	dp[1].stop(t)
	if err := c.Delete(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "replica 0 to remove the listener", func() (bool, string) {
		lb, err := obs[0].Observe(ctx, key)
		return err == nil && lb == nil, fmt.Sprintf("lb=%v err=%v", lb, err)
	})
	time.Sleep(3 * time.Second) // many of the leader's 1 s polls
	if err := c.Get(ctx, client.ObjectKeyFromObject(&svc), &svc); err != nil {
		t.Fatalf("the Service went while replica 1 still has its listener: %v", err)
	}
	dp[1] = dataPlaneReplica(t, restCfg, c, "dp-1", dirs[1], state(1))
	testutil.Eventually(t, 60*time.Second, "the Service gone, no replica listening", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(&svc), &corev1.Service{})
		lb, oerr := obs[1].Observe(ctx, key)
		return apierrors.IsNotFound(err) && lb == nil && oerr == nil, fmt.Sprintf("get=%v lb=%v", err, lb)
	})
}

// guardSeries fails unless reg serves zerodrop_connguard_closed_total for
// the listener (its three reasons, at whatever count).
func guardSeries(t *testing.T, reg *prometheus.Registry, listener, who string) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("%s: gather: %v", who, err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != "zerodrop_connguard_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" && l.GetValue() == listener {
					n++
				}
			}
		}
	}
	if n != 3 {
		t.Errorf("%s: %d series of zerodrop_connguard_closed_total{listener=%q}, want 3 (one per reason)", who, n, listener)
	}
}
