// The upstream service controller has a data race of its own (k8s.io/cloud-provider
// v0.37.2, controllers/service: processServiceCreateOrUpdate sets
// cachedService.state without the cache's lock, which allServices reads under
// it), so the race detector fails any test that runs it. These tests run
// without it: `make test` runs them in a second `go test` without -race.

//go:build !race

package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testenv"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// writes counts the provider's writes.
type writes struct {
	mu sync.Mutex
	n  []string
}

func (w *writes) add(op string) { w.mu.Lock(); w.n = append(w.n, op); w.mu.Unlock() }
func (w *writes) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.n
	w.n = nil
	return out
}

// counted is the cloud with its finished EnsureLoadBalancer calls counted.
type counted struct {
	*Cloud
	ensured *atomic.Int64
}

func (c counted) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := c.Cloud.LoadBalancer()
	return countedLB{lb, c.ensured}, ok
}

type countedLB struct {
	cloudprovider.LoadBalancer
	ensured *atomic.Int64
}

func (l countedLB) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	st, err := l.LoadBalancer.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	l.ensured.Add(1)
	return st, err
}

// TestUpstreamServiceController runs the real service controller of
// k8s.io/cloud-provider on the real API server with the lab's Azure-like
// cloud on a real HAProxy: a LoadBalancer Service without a class gets a
// load balancer with every node on its nodePort and Azure's probe per
// traffic policy, and its status; a node that joins is added; a restart with
// nothing changed writes nothing (cloud-provider-azure writes only what
// differs); the Service's deletion deletes the load balancer.
func TestUpstreamServiceController(t *testing.T) {
	env := testenv.StartEnv(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	dir := t.TempDir()
	var w writes
	prov, err := haproxy.New(ctx, haproxy.Options{Dir: filepath.Join(dir, "haproxy"), Log: testr.New(t),
		Hooks: provider.Hooks{Write: w.add}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopHAProxy(t, filepath.Join(dir, "haproxy")) })
	pool := netip.MustParsePrefix("127.0.113.0/24")

	addNode := func(name, ip string, labels map[string]string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addNode("node-a", "127.0.114.1", nil)
	addNode("node-b", "127.0.114.2", nil)

	var ensured atomic.Int64
	start := func() (stop func()) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := run(cctx, env.Config, counted{NewCloud(prov, pool), &ensured}); err != nil {
				t.Error(err)
			}
		}()
		return func() { cancel(); <-done }
	}
	stop := start()

	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, hc := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	want := func(nodes ...string) string {
		var bs []string
		for _, n := range nodes {
			bs = append(bs, fmt.Sprintf("%s:%d=active", n, np))
		}
		return fmt.Sprint(bs)
	}
	lbIs := func(what, backends string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, what, func() (bool, string) {
			lb, err := prov.Observe(ctx, "default/web")
			if err != nil || lb == nil || len(lb.Listeners) != 1 {
				return false, fmt.Sprint(lb, err)
			}
			l := lb.Listeners[0]
			var got []string
			for _, b := range l.Backends {
				got = append(got, fmt.Sprintf("%s=%s", b.ID(), b.State))
			}
			probe := model.Probe{Kind: model.ProbeHTTP, Port: hc, Path: "/healthz", IntervalMillis: 5000, Rise: 2, Fall: 2}
			return fmt.Sprint(got) == backends && l.Probe == probe && pool.Contains(netip.MustParseAddr(l.Address)),
				fmt.Sprintf("%s %+v backends %v", l.Address, l.Probe, got)
		})
	}
	lbIs("a load balancer with both nodes and the health-check node port probe", want("127.0.114.1", "127.0.114.2"))
	testutil.Eventually(t, 60*time.Second, "the Service's status", func() (bool, string) {
		s, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Status.LoadBalancer.Ingress) == 1 && pool.Contains(netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP)),
			fmt.Sprint(s.Status.LoadBalancer)
	})

	// A node joins. The service controller syncs the pool on a node's
	// creation, not on its address, which this test (no kubelet) sets after
	// creating it; a cloud finds its instances by provider ID. So the node
	// joins excluded and is then included: the label's removal is one of the
	// service controller's sync triggers (KEP-3458).
	addNode("node-c", "127.0.114.3", map[string]string{model.LabelExcludeFromLB: ""})
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, model.LabelExcludeFromLB)
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbIs("the new node in the pool", want("127.0.114.1", "127.0.114.2", "127.0.114.3"))

	// Restart with nothing changed: the service controller ensures every
	// Service again, and nothing is written.
	stop()
	w.take()
	ensured.Store(0)
	stop = start()
	testutil.Eventually(t, 60*time.Second, "the restarted controller to ensure the Service", func() (bool, string) {
		return ensured.Load() > 0, "not yet"
	})
	if got := w.take(); len(got) != 0 {
		t.Errorf("a restart with nothing changed wrote %v", got)
	}

	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the load balancer deleted with its Service", func() (bool, string) {
		lb, err := prov.Observe(ctx, "default/web")
		return err == nil && lb == nil, fmt.Sprint(lb, err)
	})
	stop()
}
