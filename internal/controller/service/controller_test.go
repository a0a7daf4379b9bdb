package service_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

var (
	newClient  = testutil.Client
	eventually = testutil.Eventually
	backendsOf = testutil.Backends
	slice      = testutil.Slice
)

func lbService(ns, name, class string, annotations map[string]string) *corev1.Service {
	svc := testutil.LBService(ns, name, class, 80, 8080)
	svc.Annotations = annotations
	return svc
}

// running is one controller process: a manager with the Service controller.
type running struct {
	prov    provider.Provider
	metrics *metrics.Metrics
	cancel  context.CancelFunc
	done    chan error
	elected <-chan struct{}
}

func (r *running) isLeader() bool {
	select {
	case <-r.elected:
		return true
	default:
		return false
	}
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	testutil.StopManager(t, r.cancel, r.done)
}

func (r *running) writes() float64 { return metrics.Sum(r.metrics.ProviderWrites) }

// backends is zerodrop_backends{state}.
func (r *running) backends(state model.BackendState) float64 {
	return promtest.ToFloat64(r.metrics.Backends.WithLabelValues(string(state)))
}

// replica configures one controller process in a test.
type replica struct {
	prov provider.Provider
	// newProv, when set, makes the replica's own provider with its hooks.
	newProv func(provider.Hooks) provider.Provider
	sync    service.SyncMode
	// leaderElect runs the manager with a Lease; release gives it up on stop
	// (false simulates a crash: the standby must wait for the lease to expire).
	leaderElect, release bool
	lease                time.Duration
	// resync is the controller's ResyncPeriod (default an hour: none
	// during a test).
	resync time.Duration
	// configure, when set, changes the configuration before Build (flags
	// a test is about: the limits).
	configure func(*controller.Config)
}

func startController(t *testing.T, cfg *rest.Config, prov provider.Provider, sync service.SyncMode) *running {
	t.Helper()
	return startReplica(t, cfg, replica{prov: prov, sync: sync})
}

// startReplica runs one controller as `zerodrop controller` wires it
// (controller.Build, with rep's provider): the Service controller these
// tests are about, beside the gates as in production.
func startReplica(t *testing.T, rc *rest.Config, rep replica) *running {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if rep.newProv != nil {
		rep.prov = rep.newProv(m.ProviderHooks("test"))
	} else if mp, ok := rep.prov.(*memory.Provider); ok {
		mp.SetHooks(m.ProviderHooks(rep.prov.Name()))
	}
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Sync, cfg.AddressPool = rc, string(rep.sync), "127.0.101.0/24"
	if cfg.Sync == "" {
		cfg.Sync = string(service.SyncIncremental)
	}
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", "0"
	cfg.LeaderElect = rep.leaderElect
	if rep.leaderElect {
		cfg.LeaderID, cfg.LeaderNamespace = "zerodrop-test", "kube-system"
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = rep.lease, rep.lease*2/3, rep.lease/8
		cfg.Override.KeepLeaseOnStop = !rep.release
	}
	cfg.ResyncPeriod = rep.resync
	if cfg.ResyncPeriod == 0 {
		cfg.ResyncPeriod = time.Hour
	}
	if rep.configure != nil {
		rep.configure(&cfg)
	}
	log := testr.New(t)
	cfg.Override.Provider, cfg.Override.Metrics, cfg.Override.Logger = rep.prov, m, &log
	ctx, cancel := context.WithCancel(context.Background())
	in, err := controller.Build(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &running{prov: rep.prov, metrics: m, cancel: cancel, done: make(chan error, 1), elected: in.Manager.Elected()}
	go func() { r.done <- in.Start(ctx) }()
	t.Cleanup(func() { cancel() })
	return r
}

func warningEvents(t *testing.T, c client.Client, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		// Only zerodrop's: the API server's own repair loops warn too (a
		// ClusterIP not yet allocated on a loaded machine).
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.ReportingController, "zerodrop") {
			out = append(out, e)
		}
	}
	return out
}

// TestLifecycleRestartAndFullSync is the memory-provider tier of the
// restart invariant: the same controller code against the real apiserver.
func TestLifecycleRestartAndFullSync(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	class := "zerodrop.dev/memory"

	svc := lbService(ns, "web", class, nil)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "web", 8080, "10.1.0.1", "10.1.0.2")); err != nil {
		t.Fatal(err)
	}
	// An unrelated class must be left alone.
	if err := c.Create(ctx, lbService(ns, "other", "example.com/other", nil)); err != nil {
		t.Fatal(err)
	}

	first := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 20*time.Second, "load balancer with two backends and ingress", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/web")
		var got corev1.Service
		_ = c.Get(ctx, client.ObjectKeyFromObject(svc), &got)
		ok := len(backendsOf(lb)) == 2 && len(got.Status.LoadBalancer.Ingress) == 1 &&
			meta.IsStatusConditionTrue(got.Status.Conditions, service.ConditionReady)
		return ok, fmt.Sprintf("backends=%v status=%+v", backendsOf(lb), got.Status)
	})
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if ip := got.Status.LoadBalancer.Ingress[0].IP; !netip.MustParsePrefix("127.0.101.0/24").Contains(netip.MustParseAddr(ip)) {
		t.Errorf("ingress %s not from the pool", ip)
	}
	if lb, _ := prov.Observe(ctx, ns+"/other"); lb != nil {
		t.Errorf("a Service of another class got a load balancer")
	}

	// Scale: endpoint changes reach the load balancer as backend ops only.
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-slice"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := c.Update(ctx, &sl); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "third backend", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/web")
		return len(backendsOf(lb)) == 3, fmt.Sprint(backendsOf(lb))
	})
	// Let the controller settle, then stop it.
	time.Sleep(500 * time.Millisecond)
	first.stop(t)
	before := len(prov.Writes())
	version := prov.Version(ns + "/web")

	// A new controller (a restart, a new leader) against unchanged objects
	// writes nothing, on start and on every periodic resync (one a second
	// here). The version catches an Apply with an empty plan, which writes
	// no op but is a write all the same (an ETag-changing PUT on a cloud).
	second := startReplica(t, cfg, replica{prov: prov, sync: service.SyncIncremental, resync: time.Second})
	eventually(t, 60*time.Second, "the restart's reconcile and three resyncs", func() (bool, string) {
		n := metrics.Sum(second.metrics.Reconciles)
		return n >= 4, fmt.Sprintf("reconciles=%v", n)
	})
	if w := second.writes(); w != 0 {
		t.Errorf("restart with nothing changed: %v provider writes, want 0 (%v)", w, prov.Writes()[before:])
	}
	if w := prov.Writes()[before:]; len(w) != 0 {
		t.Errorf("restart and resyncs with nothing changed wrote %v", w)
	}
	if v := prov.Version(ns + "/web"); v != version {
		t.Errorf("restart and resyncs with nothing changed moved the version %s -> %s: an Apply was made", version, v)
	}
	if r := metrics.Sum(second.metrics.Reconciles); r != metrics.Sum(second.metrics.Reconciles.WithLabelValues("noop")) {
		t.Errorf("%v reconciles, not all noop", r)
	}
	second.stop(t)

	// The upstream-like mode rewrites everything on start.
	full := startController(t, cfg, prov, service.SyncFull)
	eventually(t, 10*time.Second, "full sync to write", func() (bool, string) {
		return full.writes() > 0, fmt.Sprintf("writes=%v", full.writes())
	})
	full.stop(t)

	// Deletion removes the load balancer, then the finalizer.
	third := startController(t, cfg, prov, service.SyncIncremental)
	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "load balancer and Service gone", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/web")
		err := c.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
		return lb == nil && apierrors.IsNotFound(err), fmt.Sprintf("lb=%v get=%v", lb != nil, err)
	})
	third.stop(t)
}

// TestConflictsRetrySilently: a second writer changes the load balancer
// between observe and apply; the controller re-plans and converges without a
// Warning Event.
func TestConflictsRetrySilently(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	conflicts := 3
	prov.BeforeApply = func(key string) {
		if conflicts == 0 {
			return
		}
		conflicts--
		if lb, _ := prov.Observe(ctx, key); lb != nil {
			prov.Set(lb) // same content, new version: the ETag moved on
		}
	}
	if err := c.Create(ctx, lbService(ns, "race", "zerodrop.dev/memory", nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "race", 8080, "10.3.0.1")); err != nil {
		t.Fatal(err)
	}
	prov.Set(&model.LoadBalancer{Key: ns + "/race"}) // exists, so every apply can conflict
	r := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 20*time.Second, "convergence after conflicts", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/race")
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	if n := metrics.Sum(r.metrics.ProviderConflicts); n < 1 {
		t.Errorf("conflicts counted = %v, want ≥ 1", n)
	}
	if evs := warningEvents(t, c, ns, "race"); len(evs) > 0 {
		t.Errorf("transient conflicts made Warning Events: %+v", evs[0].Note)
	}
	r.stop(t)
}

// TestUnsupportedProtocol: a UDP port, which HAProxy (and so the memory
// provider) cannot balance, gets a condition and a Warning Event; the TCP port
// is served.
func TestUnsupportedProtocol(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	svc := lbService(ns, "dns", "zerodrop.dev/memory", nil)
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "udp", Port: 53, Protocol: corev1.ProtocolUDP})
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "dns", 8080, "10.5.0.1")); err != nil {
		t.Fatal(err)
	}
	r := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 20*time.Second, "TCP served, UDP reported", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/dns")
		var got corev1.Service
		_ = c.Get(ctx, client.ObjectKeyFromObject(svc), &got)
		cond := meta.FindStatusCondition(got.Status.Conditions, service.ConditionConfigValid)
		evs := warningEvents(t, c, ns, "dns")
		ok := lb != nil && len(lb.Listeners) == 1 && lb.Listeners[0].Protocol == model.TCP &&
			cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == service.ReasonUnsupportedProtocol && len(evs) > 0
		return ok, fmt.Sprintf("lb=%+v cond=%+v events=%d", lb, cond, len(evs))
	})
	r.stop(t)
}
