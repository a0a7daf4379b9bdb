package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The node-mode gate's logic: a fake cluster with nodes 127.0.0.1 and
// 127.0.0.2, Service ns/web in node mode, pod ns/web terminating on the
// first, and stand-ins for the nodes' kube-proxy /healthz (the real
// kube-proxy runs in the lab's tests).

const nodePort = 30080

// fakeProxy answers /healthz as kube-proxy 1.31+ does, with the IPv4
// proxier's last sync at whatever synced returns; stopped: it accepts and
// never answers, as a kube-proxy stopped with SIGSTOP.
type fakeProxy struct {
	synced  atomic.Pointer[time.Time]
	stopped atomic.Bool
	reads   atomic.Int64
}

func (p *fakeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.reads.Add(1)
	if p.stopped.Load() {
		<-r.Context().Done()
		return
	}
	h := map[string]any{"lastUpdated": time.Now(), "currentTime": time.Now(),
		"status": map[string]any{"IPv4": map[string]any{"lastUpdated": *p.synced.Load(), "healthy": true}}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h)
}

// startProxies serves one fakeProxy on 127.0.0.1 and one on 127.0.0.2, on
// the same port as kube-proxy listens on every node.
func startProxies(t *testing.T) (port int32, proxies [2]*fakeProxy) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(l1.Addr().String())
	l2, err := net.Listen("tcp", "127.0.0.2:"+p)
	if err != nil {
		t.Skipf("second loopback address: %v", err)
	}
	for i, l := range []net.Listener{l1, l2} {
		proxies[i] = &fakeProxy{}
		long := time.Now().Add(-time.Hour)
		proxies[i].synced.Store(&long)
		s := &httptest.Server{Listener: l, Config: &http.Server{Handler: proxies[i]}}
		s.Start()
		t.Cleanup(s.Close)
	}
	n, _ := strconv.Atoi(p)
	return int32(n), proxies
}

type nodeCase struct {
	policy  corev1.ServiceExternalTrafficPolicy
	sibling bool // a ready pod of the Service on the same node
	// unpublished: the slice still shows the pod's endpoint ready.
	unpublished bool
}

func nodeFixture(t *testing.T, c nodeCase, grace time.Duration, prov provider.Provider, o Options) *Handler {
	h, _ := nodeFixtureClient(t, c, grace, prov, o)
	return h
}

func nodeFixtureClient(t *testing.T, c nodeCase, grace time.Duration, prov provider.Provider, o Options) (*Handler, client.Client) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web",
		Annotations: map[string]string{model.AnnotationBackendMode: string(model.NodeMode)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: c.policy,
			Ports:                 []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, NodePort: nodePort}}}}
	var nodes []*corev1.Node
	for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i+1)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Labels: map[string]string{"app": "web"},
		Finalizers: []string{"test/keep"}, DeletionTimestamp: &metav1.Time{Time: time.Now().Add(grace)},
		DeletionGracePeriodSeconds: ptr.To(int64(grace / time.Second))},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To("n1"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: "u1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}}}
	if c.unpublished {
		slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(true)}
	}
	if c.sibling {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}, NodeName: ptr.To("n1"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-2", UID: "u9"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	reader := fake.NewClientBuilder().WithObjects(svc, pod, nodes[0], nodes[1], slice).Build()
	o.Reader = reader
	o.Finder = &lbtarget.Finder{Reader: reader, Services: allManaged{}, Provider: prov}
	// The pod's wait loop may still be ending when the call has been
	// answered and the test is over: log through t only while it runs.
	var mu sync.Mutex
	over := false
	t.Cleanup(func() { mu.Lock(); over = true; mu.Unlock() })
	o.Logger = funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			t.Log(prefix, args)
		}
	}, funcr.Options{})
	o.PollInterval, o.CacheLag = 10*time.Millisecond, 50*time.Millisecond
	return NewHandler(o), reader
}

// histogramCount is the number of observations of every series of h.
func histogramCount(t *testing.T, h *prometheus.HistogramVec) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	go func() { h.Collect(ch); close(ch) }()
	var n uint64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		n += pb.GetHistogram().GetSampleCount()
	}
	return n
}

// nodeStatus is the two nodes' backends on the Service's listener.
func nodeStatus(n1, n2 model.BackendState, n2Healthy bool) []provider.BackendStatus {
	return []provider.BackendStatus{
		{Listener: testListener, Address: "127.0.0.1", Port: nodePort, State: n1, Healthy: true, HealthKnown: true, Connections: 3},
		{Listener: testListener, Address: "127.0.0.2", Port: nodePort, State: n2, Healthy: n2Healthy, HealthKnown: true, Connections: 3},
	}
}

func callNodeGate(t *testing.T, h *Handler) gateAnswer {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
}

// TestNodeLocalLastPodWaitsForItsNodeDrained: the pod is its node's last
// local endpoint of a Local Service, so the node's backend is the pod's: the
// call answers once the load balancer has it in drain, and asks no
// kube-proxy (with /healthz out of reach and a fallback of an hour, asking
// would hold the call to its deadline).
func TestNodeLocalLastPodWaitsForItsNodeDrained(t *testing.T) {
	var reads, activeReads atomic.Int64
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		if reads.Add(1) <= 3 {
			activeReads.Add(1)
			return nodeStatus(model.Active, model.Active, true), nil
		}
		return nodeStatus(model.Draining, model.Active, true), nil
	}}
	h := nodeFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal}, 6*time.Second, prov,
		Options{KubeProxyFallback: time.Hour})
	a := callNodeGate(t, h)
	if a.err != nil || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want drained once the node drains", a.code, a.result, a.body, a.err)
	}
	if n := activeReads.Load(); n < 3 {
		t.Fatalf("answered after %d reads of the active node, want it to wait through all 3", n)
	}
}

// TestNodeLocalSiblingWaitsForItsKubeProxy: with a ready sibling on the
// node, the node stays active and its kube-proxy is what must stop sending
// to the pod: the call waits for a sync of that kube-proxy after the
// deletion plus the margin, and asks no other node's.
func TestNodeLocalSiblingWaitsForItsKubeProxy(t *testing.T) {
	port, proxies := startProxies(t)
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		return nodeStatus(model.Active, model.Active, true), nil
	}}
	h := nodeFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal, sibling: true}, 6*time.Second, prov,
		Options{KubeProxy: &kubeproxy.Client{Port: port}, KubeProxyMargin: 100 * time.Millisecond})
	go func() {
		for proxies[0].reads.Load() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		now := time.Now()
		proxies[0].synced.Store(&now)
	}()
	a := callNodeGate(t, h)
	if a.err != nil || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want drained once the node's kube-proxy synced", a.code, a.result, a.body, a.err)
	}
	if n := proxies[0].reads.Load(); n < 4 {
		t.Fatalf("answered after %d reads of the node's kube-proxy, want it to wait for the sync (4th read)", n)
	}
	if n := proxies[1].reads.Load(); n != 0 {
		t.Fatalf("the other node's kube-proxy was read %d times; Local traffic reaches the pod only through its own node", n)
	}
}

// TestNodeWaitsForTheEndpointChange: kube-proxy acts on the EndpointSlice,
// so while the slice (this replica's cache of it) still shows the pod's
// endpoint ready, a synced kube-proxy proves nothing: the call waits for the
// change, then the margin.
func TestNodeWaitsForTheEndpointChange(t *testing.T) {
	port, proxies := startProxies(t)
	later := time.Now().Add(time.Hour)
	proxies[0].synced.Store(&later)
	proxies[1].synced.Store(&later)
	var looks atomic.Int64
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		looks.Add(1)
		return nodeStatus(model.Active, model.Active, true), nil
	}}
	h, c := nodeFixtureClient(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyCluster, unpublished: true}, 30*time.Second, prov,
		Options{KubeProxy: &kubeproxy.Client{Port: port}, KubeProxyMargin: 100 * time.Millisecond})
	var published atomic.Bool
	go func() {
		for looks.Load() < 30 { // well past the margin
			time.Sleep(5 * time.Millisecond)
		}
		var s discoveryv1.EndpointSlice
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "web-1"}, &s); err != nil {
			t.Error(err)
			return
		}
		s.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		published.Store(true)
		if err := c.Update(context.Background(), &s); err != nil {
			t.Error(err)
		}
	}()
	a := callNodeGate(t, h)
	if a.err != nil || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want drained once the slice shows the change", a.code, a.result, a.body, a.err)
	}
	if !published.Load() {
		t.Fatal("answered drained while the EndpointSlice still showed the pod's endpoint ready")
	}
}

// TestNodeClusterWaitsForEveryKubeProxy: with Cluster every node forwards
// to the pod. One kube-proxy synced, the other stopped (it accepts and never
// answers): the call waits while the load balancer still sends to that
// node, and answers once its probe reports the node down; if the node never
// goes down, the answer is the deadline's.
func TestNodeClusterWaitsForEveryKubeProxy(t *testing.T) {
	port, proxies := startProxies(t)
	now := time.Now().Add(time.Second)
	proxies[0].synced.Store(&now)
	proxies[1].stopped.Store(true)
	var down atomic.Bool
	var readsWhileUp atomic.Int64
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		if down.Load() {
			return nodeStatus(model.Active, model.Active, false), nil
		}
		readsWhileUp.Add(1)
		return nodeStatus(model.Active, model.Active, true), nil
	}}
	opts := Options{KubeProxy: &kubeproxy.Client{Port: port, HTTP: &http.Client{Timeout: 100 * time.Millisecond}},
		KubeProxyMargin: 100 * time.Millisecond}

	t.Run("the stopped node goes down", func(t *testing.T) {
		h := nodeFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyCluster}, 30*time.Second, prov, opts)
		go func() {
			for proxies[1].reads.Load() < 3 {
				time.Sleep(5 * time.Millisecond)
			}
			down.Store(true)
		}()
		a := callNodeGate(t, h)
		if a.err != nil || a.result != "drained" {
			t.Fatalf("got %d %q %q (%v), want drained once the stopped node is down", a.code, a.result, a.body, a.err)
		}
		if !down.Load() || readsWhileUp.Load() < 3 {
			t.Fatalf("answered while the stopped kube-proxy's node still took traffic (%d reads)", readsWhileUp.Load())
		}
	})
	t.Run("the stopped node stays up", func(t *testing.T) {
		down.Store(false)
		// Grace 3 s: the deadline is 2 s away. The answer at the deadline
		// is an operator's signal: a Warning Event on the pod, the outcome
		// counted and the wait observed.
		rec := events.NewFakeRecorder(10)
		m, err := metrics.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Recorder, o.Metrics = rec, m
		h := nodeFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyCluster}, 3*time.Second, prov, o)
		if a := callNodeGate(t, h); a.err != nil || a.result != "timeout" {
			t.Fatalf("got %d %q %q (%v), want timeout: a kube-proxy that never answers holds the call to its deadline", a.code, a.result, a.body, a.err)
		}
		select {
		case e := <-rec.Events:
			if !strings.HasPrefix(e, "Warning DrainDeadline ") {
				t.Errorf("event %q, want a Warning DrainDeadline", e)
			}
		default:
			t.Error("no Event on the pod for a drain call that reached its deadline")
		}
		if n := metrics.Sum(m.DrainOutcomes); n != 1 || histogramCount(t, m.DrainWait) != 1 {
			t.Errorf("outcomes counted %v, waits observed %d; want 1 and 1", n, histogramCount(t, m.DrainWait))
		}
	})
}
