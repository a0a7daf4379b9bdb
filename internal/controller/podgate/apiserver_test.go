package podgate

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	testutilprom "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const class = "zerodrop.dev/memory"

// classServices stands in for the Service controller: Services of the memory
// class are zerodrop's, each with its own load balancer.
type classServices struct{}

func (classServices) Managed(s *corev1.Service) bool {
	return s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == class
}
func (classServices) Key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// staleCache serves the pods it holds instead of the apiserver's, a given
// number of times each: an informer cache that has not seen the latest
// write yet.
type staleCache struct {
	client.Client
	mu    sync.Mutex
	pods  map[client.ObjectKey]*corev1.Pod
	times map[client.ObjectKey]int
}

func (s *staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	s.mu.Lock()
	p, ok := s.pods[key]
	if ok && s.times[key] > 0 {
		s.times[key]--
		s.mu.Unlock()
		if pod, isPod := obj.(*corev1.Pod); isPod {
			p.DeepCopyInto(pod)
			return nil
		}
	} else {
		s.mu.Unlock()
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// newTestReconciler is the gate controller's reconciler as Setup builds it,
// reading pods through c and load balancers through prov.
func newTestReconciler(t *testing.T, c client.Client, prov provider.Provider) *Reconciler {
	finder := &lbtarget.Finder{Reader: c, Services: classServices{}, Provider: prov}
	return &Reconciler{client: c, opts: Options{Finder: finder, PollInterval: 100 * time.Millisecond, MaxPollInterval: time.Second, Logger: testr.New(t)},
		limiter: rate.NewLimiter(rate.Inf, 1), unserved: newUnservedPods(nil)}
}

// settle runs Reconcile for the pod as the work queue would until it asks
// for nothing more (at most a few rounds: conflicts are retried) and returns
// the last result.
func settle(t *testing.T, r *Reconciler, ns, name string) reconcile.Result {
	t.Helper()
	var res reconcile.Result
	var err error
	for i := 0; i < 5; i++ {
		res, err = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
		if err == nil && !res.Requeue { //nolint:staticcheck // Requeue is what a conflict asks for
			return res
		}
		t.Logf("reconcile round %d: result %+v, err %v", i, res, err)
	}
	if err != nil {
		t.Fatalf("reconcile of %s/%s kept failing: %v", ns, name, err)
	}
	return res
}

func namespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// gatedPod is a scheduled pod with the gate whose containers are ready, as a
// kubelet reports it, at the given addresses (the first is status.podIP).
func gatedPod(t *testing.T, c client.Client, ns, name, app string, ips ...string) *corev1.Pod {
	t.Helper()
	pod, err := newGatedPod(context.Background(), c, ns, name, app, ips...)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// newGatedPod is gatedPod for goroutines other than the test's.
func newGatedPod(ctx context.Context, c client.Client, ns, name, app string, ips ...string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName:       "node-1",
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: ConditionType}},
			Containers:     []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		PodIP: ips[0],
		Conditions: []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		},
	}
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("set status of pod %s/%s: %w", ns, name, err)
	}
	return pod, nil
}

func condition(t *testing.T, c client.Client, ns, name string, typ corev1.PodConditionType) corev1.ConditionStatus {
	t.Helper()
	var pod corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == typ {
			return cond.Status
		}
	}
	return ""
}

// serve registers backends (address:port) on the Service's port-80 listener.
func serve(prov *memory.Provider, ns, svc string, backends ...model.Backend) {
	prov.Set(&model.LoadBalancer{Key: ns + "/" + svc, Listeners: []model.Listener{{
		Name: model.ListenerName(ns, svc, corev1.ProtocolTCP, 80), Port: 80, Protocol: model.TCP, Backends: backends}}})
}

func backend(addr string, port int32) model.Backend {
	return model.Backend{Address: addr, Port: port, Weight: 1, State: model.Active}
}

// TestGateOnAPIServer runs the gate's reconciler against the real apiserver
// and the memory provider.
func TestGateOnAPIServer(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx := context.Background()

	// Issue item 6: the gate decides from a cached pod; meanwhile the kubelet
	// flips ContainersReady to False. The gate's write must not bring the
	// kubelet's old conditions back.
	t.Run("StaleCacheKeepsKubeletConditions", func(t *testing.T) {
		ns := namespace(t, c, "stale")
		prov := memory.New(provider.Hooks{})
		if err := c.Create(ctx, testutil.LBService(ns, "web", class, 80, 8080)); err != nil {
			t.Fatal(err)
		}
		cached := gatedPod(t, c, ns, "web-a", "web", "10.7.0.1")
		serve(prov, ns, "web", backend("10.7.0.1", 8080))

		// The kubelet's write, which the cache has not seen.
		var now corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(cached), &now); err != nil {
			t.Fatal(err)
		}
		for i := range now.Status.Conditions {
			if now.Status.Conditions[i].Type == corev1.ContainersReady {
				now.Status.Conditions[i].Status = corev1.ConditionFalse
				now.Status.Conditions[i].Reason = "ContainersNotReady"
			}
		}
		if err := c.Status().Update(ctx, &now); err != nil {
			t.Fatal(err)
		}

		key := client.ObjectKeyFromObject(cached)
		stale := &staleCache{Client: c, pods: map[client.ObjectKey]*corev1.Pod{key: cached}, times: map[client.ObjectKey]int{key: 2}}
		settle(t, newTestReconciler(t, stale, prov), ns, "web-a")

		if got := condition(t, c, ns, "web-a", corev1.ContainersReady); got != corev1.ConditionFalse {
			t.Errorf("ContainersReady = %q after the gate's patch, want False: the gate overwrote the kubelet's condition", got)
		}
		if got := condition(t, c, ns, "web-a", ConditionType); got != corev1.ConditionTrue {
			t.Errorf("gate condition = %q, want True", got)
		}
	})

	// Issue item 7: a dual-stack pod whose backend is registered under its
	// IPv6 address (a Service of the IPv6 family) is served.
	t.Run("DualStackSecondAddress", func(t *testing.T) {
		ns := namespace(t, c, "dual")
		prov := memory.New(provider.Hooks{})
		if err := c.Create(ctx, testutil.LBService(ns, "web", class, 80, 8080)); err != nil {
			t.Fatal(err)
		}
		gatedPod(t, c, ns, "web-a", "web", "10.7.1.1", "fd00:7:1::1")
		r := newTestReconciler(t, c, prov)
		serve(prov, ns, "web", backend("10.7.1.2", 8080))
		settle(t, r, ns, "web-a")
		if got := condition(t, c, ns, "web-a", ConditionType); got == corev1.ConditionTrue {
			t.Fatal("gate opened while no load balancer has any address of the pod")
		}
		serve(prov, ns, "web", backend("10.7.1.2", 8080), backend("fd00:7:1::1", 8080))
		settle(t, r, ns, "web-a")
		if got := condition(t, c, ns, "web-a", ConditionType); got != corev1.ConditionTrue {
			t.Errorf("gate condition = %q with the backend registered under the pod's IPv6 address, want True", got)
		}
	})

	// zerodrop_readiness_gate_seconds: observed once, when the gate opens,
	// from the pod's ContainersReady transition.
	t.Run("Latency", func(t *testing.T) {
		ns := namespace(t, c, "latency")
		prov := memory.New(provider.Hooks{})
		if err := c.Create(ctx, testutil.LBService(ns, "web", class, 80, 8080)); err != nil {
			t.Fatal(err)
		}
		pod := gatedPod(t, c, ns, "web-a", "web", "10.7.2.1")
		readyAt := metav1.NewTime(time.Now().Add(-3 * time.Second))
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == corev1.ContainersReady {
				pod.Status.Conditions[i].LastTransitionTime = readyAt
			}
		}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gate_seconds"})
		r := newTestReconciler(t, c, prov)
		r.opts.Latency = hist
		settle(t, r, ns, "web-a")
		if n := histogramCount(t, hist); n != 0 {
			t.Fatalf("%d latencies observed while no load balancer serves the pod, want 0", n)
		}
		serve(prov, ns, "web", backend("10.7.2.1", 8080))
		settle(t, r, ns, "web-a")
		settle(t, r, ns, "web-a")
		var m dto.Metric
		if err := hist.Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram().GetSampleCount(); got != 1 {
			t.Fatalf("%d latencies observed after the gate opened (and one more reconcile), want 1", got)
		}
		if sum := m.GetHistogram().GetSampleSum(); sum < 3 {
			t.Errorf("observed %.2fs, want at least the 3 s since ContainersReady turned True", sum)
		}
	})

	// Issue 46, M7: a pod that stays unserved is checked every PollInterval
	// at first, then less and less often, up to MaxPollInterval; it counts
	// in its namespace's gauge until it is served, and the gate still opens
	// only once it is (invariant 5).
	t.Run("BackoffWhileUnserved", func(t *testing.T) {
		ns := namespace(t, c, "backoff")
		prov := memory.New(provider.Hooks{})
		if err := c.Create(ctx, testutil.LBService(ns, "web", class, 80, 8080)); err != nil {
			t.Fatal(err)
		}
		gatedPod(t, c, ns, "web-a", "web", "10.7.3.1")
		serve(prov, ns, "web")
		gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unserved"}, []string{"namespace"})
		r := newTestReconciler(t, c, prov)
		r.unserved = newUnservedPods(gauge)
		var got []time.Duration
		for i := 0; i < 40; i++ {
			got = append(got, settle(t, r, ns, "web-a").RequeueAfter)
		}
		// PollInterval 100ms until 1s is waited, then a tenth of the
		// time waited (110ms after 1.1s, 121ms after 1.21s), capped at 1s.
		want := map[int]time.Duration{0: 100 * time.Millisecond, 10: 100 * time.Millisecond,
			11: 110 * time.Millisecond, 12: 121 * time.Millisecond, 39: time.Second}
		for i, w := range want {
			if got[i] != w {
				t.Fatalf("checks of an unserved pod requeued after %v; check %d after %s, want %s", got, i+1, got[i], w)
			}
		}
		if n := testutilprom.ToFloat64(gauge.WithLabelValues(ns)); n != 1 {
			t.Errorf("unserved pods of %s: %v, want 1", ns, n)
		}
		if got := condition(t, c, ns, "web-a", ConditionType); got == corev1.ConditionTrue {
			t.Fatal("gate opened while the load balancer does not serve the pod")
		}
		serve(prov, ns, "web", backend("10.7.3.1", 8080))
		if res := settle(t, r, ns, "web-a"); res.RequeueAfter != 0 {
			t.Errorf("served pod requeued after %s", res.RequeueAfter)
		}
		if got := condition(t, c, ns, "web-a", ConditionType); got != corev1.ConditionTrue {
			t.Errorf("gate condition = %q once served, want True", got)
		}
		if n := testutilprom.CollectAndCount(gauge); n != 0 {
			t.Errorf("%d unserved-pod series left once the pod is served, want none", n)
		}
	})
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
