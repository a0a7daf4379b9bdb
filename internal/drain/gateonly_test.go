package drain

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The gate for a gate-only Service: the node-mode fixture's Service ns/web
// turned gate-only (another controller writes its load balancer, at ingress
// 10.1.0.10), its rule read through a scripted provider.ForeignReader.

// noneManaged: zerodrop writes no Service here.
type noneManaged struct{}

func (noneManaged) Managed(*corev1.Service) bool { return false }
func (noneManaged) Key(*corev1.Service) string   { return "" }

// foreign answers ForeignRule for 10.1.0.10:80/TCP with backends from rule.
type foreign struct {
	reads atomic.Int64
	rule  func(n int64) []provider.BackendStatus
}

func (f *foreign) ForeignRule(_ context.Context, frontend string, port int32, proto model.Protocol) (*provider.ForeignRule, error) {
	if frontend != "10.1.0.10" || port != 80 || proto != model.TCP {
		return nil, nil
	}
	bs := f.rule(f.reads.Add(1))
	for i := range bs {
		bs[i].Listener = "kubernetes-internal/a1-TCP-80"
	}
	return &provider.ForeignRule{LB: "kubernetes-internal", Rule: "a1-TCP-80", Settle: time.Second, Backends: bs}, nil
}

// ruleNodes is the two nodes in the rule's pool, active, n1's probe as given.
func ruleNodes(n1 provider.BackendStatus) []provider.BackendStatus {
	n1.Address, n1.Port, n1.State, n1.Connections = "127.0.0.1", 80, model.Active, -1
	return []provider.BackendStatus{n1, {Address: "127.0.0.2", Port: 80, State: model.Active, HealthKnown: true, Healthy: true,
		Probed: true, ProbedAt: time.Now(), Connections: -1}}
}

func gateOnlyFixture(t *testing.T, c nodeCase, grace time.Duration, f *foreign, o Options) *Handler {
	t.Helper()
	h, reader := nodeFixtureClient(t, c, grace, scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		t.Error("a gate-only Service's pod read zerodrop's own load balancers")
		return nil, nil
	}}, o)
	var svc corev1.Service
	ctx := context.Background()
	if err := reader.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "web"}, &svc); err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{model.AnnotationGateOnly: "true"}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.1.0.10"}}
	if err := reader.Update(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.1.0.10"}}
	if err := reader.Status().Update(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	h.opts.Finder.Services, h.opts.Finder.GateOnly = noneManaged{}, f
	return h
}

// TestGateOnlyLocalLastPodWaitsForProbeDown: the pod is its node's last
// ready endpoint of a Local gate-only Service; the other controller keeps
// the node in its pool, active, so the call answers only once rule health
// has the node's probe go Down after the deletion began: Up in a read begun
// after then, Down in a later one. Not while it is Up; not on a Down read
// before the deletion; not on a Down read after it that follows no Up —
// rule health lags its probes, and such a Down may describe the node
// before it first came up (the lab lost traffic on one at a 5 s lag). It
// asks no kube-proxy (a fallback of an hour would hold the call).
func TestGateOnlyLocalLastPodWaitsForProbeDown(t *testing.T) {
	var staleReads atomic.Int64
	var upRead atomic.Pointer[time.Time]
	f := &foreign{rule: func(n int64) []provider.BackendStatus {
		now := time.Now()
		switch {
		case n <= 2: // read before the deletion
			staleReads.Add(1)
			return ruleNodes(provider.BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: now.Add(-time.Hour)})
		case n <= 4: // read after it, never Up: the node before it came up
			staleReads.Add(1)
			return ruleNodes(provider.BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: now})
		case n <= 6:
			upRead.CompareAndSwap(nil, &now)
			return ruleNodes(provider.BackendStatus{HealthKnown: true, Healthy: true, Lags: true, Probed: true, ProbedAt: now, UpAt: now})
		}
		return ruleNodes(provider.BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: now, UpAt: *upRead.Load()})
	}}
	h := gateOnlyFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal}, 20*time.Second, f, Options{KubeProxyFallback: time.Hour})
	a := callNodeGate(t, h)
	if a.err != nil || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want drained once the node's probe is read Down", a.code, a.result, a.body, a.err)
	}
	if n := f.reads.Load(); n < 7 || staleReads.Load() < 4 {
		t.Fatalf("answered after %d reads (%d stale Down), want it to wait through the stale Down and the Up reads", n, staleReads.Load())
	}
}

// TestGateOnlyLocalLastPodHeldWhileProbeUp: the node's probe stays Up and
// the node in the pool: nothing says the load balancer stopped, so the call
// ends at its bound with "timeout", never "drained".
func TestGateOnlyLocalLastPodHeldWhileProbeUp(t *testing.T) {
	f := &foreign{rule: func(int64) []provider.BackendStatus {
		return ruleNodes(provider.BackendStatus{HealthKnown: true, Healthy: true, Probed: true, ProbedAt: time.Now()})
	}}
	h := gateOnlyFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal}, 3*time.Second, f, Options{KubeProxyFallback: time.Hour})
	if a := callNodeGate(t, h); a.err != nil || a.result != "timeout" {
		t.Fatalf("got %d %q %q (%v), want timeout while the node's probe is Up", a.code, a.result, a.body, a.err)
	}
}

// TestGateOnlyLocalSiblingWaitsForItsKubeProxy: with a ready sibling on the
// node its probe stays Up (rightly): the node's kube-proxy is what must stop
// sending to the pod, and the call waits for its sync after the deletion.
func TestGateOnlyLocalSiblingWaitsForItsKubeProxy(t *testing.T) {
	port, proxies := startProxies(t)
	f := &foreign{rule: func(int64) []provider.BackendStatus {
		return ruleNodes(provider.BackendStatus{HealthKnown: true, Healthy: true, Probed: true, ProbedAt: time.Now()})
	}}
	h := gateOnlyFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal, sibling: true}, 20*time.Second, f,
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
		t.Fatalf("answered after %d reads of the node's kube-proxy, want it to wait for the sync", n)
	}
	if n := proxies[1].reads.Load(); n != 0 {
		t.Fatalf("the other node's kube-proxy was read %d times; Local traffic reaches the pod only through its own node", n)
	}
}

// TestGateOnlyClusterWaitsForEveryKubeProxy: Cluster: every node of the
// rule's pool that is not probed Down may send to the pod through its
// kube-proxy; the call waits for both.
func TestGateOnlyClusterWaitsForEveryKubeProxy(t *testing.T) {
	port, proxies := startProxies(t)
	f := &foreign{rule: func(int64) []provider.BackendStatus {
		return ruleNodes(provider.BackendStatus{HealthKnown: true, Healthy: true, Probed: true, ProbedAt: time.Now()})
	}}
	h := gateOnlyFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyCluster}, 20*time.Second, f,
		Options{KubeProxy: &kubeproxy.Client{Port: port}, KubeProxyMargin: 100 * time.Millisecond})
	go func() {
		for proxies[1].reads.Load() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		now := time.Now()
		proxies[0].synced.Store(&now)
		proxies[1].synced.Store(&now)
	}()
	a := callNodeGate(t, h)
	if a.err != nil || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want drained once both kube-proxies synced", a.code, a.result, a.body, a.err)
	}
	if n := proxies[1].reads.Load(); n < 4 {
		t.Fatalf("answered after %d reads of the second node's kube-proxy, want it to wait for its sync", n)
	}
}
