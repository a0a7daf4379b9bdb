// Package e2e holds integration tests that run the whole controller — the
// Service controller, the readiness gate and the drain endpoint — against the
// real apiserver, with the in-memory provider or a real HAProxy.
package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	zcontroller "zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// labMapText publishes loopback servers with addresses the API server
// accepts (--backend-address-map).
const labMapText = "198.18.0.0/15=127.18.0.0/15"

var (
	newClient  = testutil.Client
	lbService  = testutil.LBService
	eventually = testutil.Eventually
	backendsOf = testutil.Backends
	freePort   = testutil.FreePort
)

type controller struct {
	metrics  *metrics.Metrics
	drainURL string
	cancel   context.CancelFunc
	done     chan error
}

func (c *controller) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("manager: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop")
	}
}

type controllerOptions struct {
	sync      service.SyncMode
	immediate bool
	pool      string
	// drainProvider, when set, is what the drain endpoint asks instead of
	// prov (a wrapper that fails some reads).
	drainProvider provider.Provider
	// class, when set, is the controller's --load-balancer-class.
	class string
}

// startController runs the controller as `zerodrop controller` does
// (controller.Build: the Service controller, the readiness gate and the
// drain endpoint) on prov and m.
func startController(t *testing.T, rc *rest.Config, prov provider.Provider, m *metrics.Metrics, o controllerOptions) *controller {
	t.Helper()
	if m == nil {
		var err error
		if m, err = metrics.New(prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
	}
	if o.pool == "" {
		o.pool = "127.0.102.0/24"
	}
	addr := freeAddr(t)
	cfg := zcontroller.DefaultConfig()
	cfg.RESTConfig = rc
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", addr
	// Tests run controllers side by side, each on its own Services.
	cfg.LeaderElect = false
	cfg.Sync, cfg.Immediate = string(o.sync), o.immediate
	if cfg.Sync == "" {
		cfg.Sync = string(service.SyncIncremental)
	}
	cfg.AddressPool, cfg.AddressMap = o.pool, labMapText
	if o.class != "" {
		cfg.Class = o.class
	}
	// The tests' nodes run no kube-proxy: node-mode Cluster listeners
	// probe the nodePort, and the drain waits the fallback delay.
	cfg.KubeProxyHealthzPort = 0
	cfg.ResyncPeriod = time.Hour
	log := testr.New(t)
	// Shorter than production's, so that the tests run in seconds.
	cfg.Override = zcontroller.Overrides{Provider: prov, DrainProvider: o.drainProvider, Metrics: m, Logger: &log,
		DrainPollInterval: 200 * time.Millisecond, CoalesceWindow: 100 * time.Millisecond,
		GatePollInterval: 100 * time.Millisecond, DrainCallPollInterval: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in, err := zcontroller.Build(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{metrics: m, drainURL: "http://" + addr + drain.Path, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- in.Start(ctx) }()
	return c
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// endpoint is one pod as an EndpointSlice lists it.
type endpoint struct {
	ip                          string
	pod                         string
	node                        string
	ready, serving, terminating bool
}

func readyEndpoint(ip string) endpoint { return endpoint{ip: ip, ready: true, serving: true} }

// setSlice creates or replaces the Service's one EndpointSlice, as the
// EndpointSlice controller would.
func setSlice(t *testing.T, c client.Client, ns, svc string, port int32, eps ...endpoint) {
	t.Helper()
	ctx := context.Background()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-slice", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)}}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		if e.node != "" {
			ep.NodeName = ptr.To(e.node)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	var cur discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err == nil {
		cur.Endpoints, cur.Ports = s.Endpoints, s.Ports
		if err := c.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// gatedPod is a scheduled pod with zerodrop's readiness gate whose containers
// are ready (as a kubelet would report it), with the given published IP.
func gatedPod(t *testing.T, c client.Client, ns, name, app, ip string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName:       "node-1",
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}},
			Containers:     []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  ip,
		PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func gateTrue(t *testing.T, c client.Client, ns, name string) bool {
	t.Helper()
	var pod corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == podgate.ConditionType {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
