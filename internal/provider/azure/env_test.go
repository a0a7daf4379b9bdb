package azure_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// The integration tests share one real kube-apiserver + etcd, each test in
// its own namespace; it starts with the first test that needs it.
var (
	envOnce sync.Once
	env     *controlplane.Env
	envErr  error
)

func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard())
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func apiserver(t *testing.T) *rest.Config {
	t.Helper()
	envOnce.Do(func() { env, envErr = controlplane.Run() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env.Config
}

// classOf gives each test's namespace its own loadBalancerClass: the
// apiserver is shared, and a test's controller must not manage the Services
// earlier tests left behind.
func classOf(ns string) string { return "zerodrop.dev/azure-" + ns }

// running is one controller process with the Azure provider.
type running struct {
	prov    *azure.Provider
	metrics *metrics.Metrics
	cancel  context.CancelFunc
	done    chan error
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	testutil.StopManager(t, r.cancel, r.done)
}

// startController runs the controller as `zerodrop controller --provider
// azure` does (controller.Build) on the emulator: KeyFunc maps Services to
// load balancers, no address pool (Azure assigns).
func startController(t *testing.T, cfg *rest.Config, emu *azurearm.Emulator, ns string, sync service.SyncMode, lbs ...string) *running {
	t.Helper()
	return startControllerWith(t, cfg, emu, ns, sync, nil, lbs...)
}

// startControllerWith is startController with tune changing the provider's
// options (nil: none).
func startControllerWith(t *testing.T, cfg *rest.Config, emu *azurearm.Emulator, ns string, sync service.SyncMode, tune func(*azure.Options), lbs ...string) *running {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	prov := newProviderWith(t, emu, m.ProviderHooks("azure"), tune, lbs...)
	ctx, cancel := context.WithCancel(context.Background())
	in := buildController(t, ctx, cfg, prov, m, ns, sync, "0")
	r := &running{prov: prov, metrics: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- in.Start(ctx) }()
	t.Cleanup(cancel)
	return r
}

// buildController builds the controller on prov (the tests' own provider
// on the emulator: its subscription is no GUID, and its polls are faster
// than the SDK allows outside a test binary) with drainAddr its drain
// endpoint ("0": none); tune changes the configuration further.
func buildController(t *testing.T, ctx context.Context, rc *rest.Config, prov *azure.Provider, m *metrics.Metrics, ns string, sync service.SyncMode,
	drainAddr string, tune ...func(*controller.Config)) *controller.Instance {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Provider, cfg.Class = rc, "azure", classOf(ns)
	cfg.Sync = string(sync)
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", drainAddr
	// Tests run controllers side by side, each on its own Services.
	cfg.LeaderElect = false
	cfg.ResyncPeriod = time.Hour
	log := testLogger(t)
	// Shorter than production's, so that the tests run in seconds.
	cfg.Override = controller.Overrides{Provider: prov, Metrics: m, Logger: &log,
		DrainPollInterval: 200 * time.Millisecond, CoalesceWindow: 100 * time.Millisecond, DrainCallPollInterval: 50 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	in, err := controller.Build(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// testLogger logs through t until the test ends, and then not at all: the
// controller's goroutines may outlive a failed test by a moment.
func testLogger(t *testing.T) logr.Logger {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{})
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func namespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// lbService is a zerodrop Service on lbName (annotation; "" lets KeyFunc
// hash it) with ports 80→8080 and, with https, 443→8443, in IP mode by its
// annotation (the provider's default is node mode). Old endpoints drain
// for no time, so that tests converge quickly.
func lbService(ns, name, lbName string, https bool) *corev1.Service {
	ann := map[string]string{"zerodrop.dev/drain-timeout": "0s", model.AnnotationBackendMode: string(model.IPMode)}
	if lbName != "" {
		ann[azure.AnnotationLoadBalancer] = lbName
	}
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To(classOf(ns)),
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if https {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP})
	}
	return s
}

// endpointSlice publishes ready endpoints on both target ports.
func endpointSlice(ns, svc string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-slice", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func warnings(t *testing.T, c client.Client, ns string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		// Only zerodrop's: the API server's own repair loops warn too (a
		// ClusterIP not yet allocated on a loaded machine), about nothing
		// zerodrop did.
		if e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.ReportingController, "zerodrop") {
			out = append(out, e)
		}
	}
	return out
}

// emulatorState reads what Azure holds, straight from the emulator: per
// zerodrop rule, its pool's addresses with their admin state.
func emulatorState(emu *azurearm.Emulator, lbs ...string) map[string][]string {
	out := map[string][]string{}
	for _, name := range lbs {
		lb, ok := emu.LoadBalancer(group, name)
		if !ok {
			continue
		}
		pools := map[string][]string{}
		for _, p := range lb.Properties.BackendAddressPools {
			for _, a := range p.Properties.LoadBalancerBackendAddresses {
				pools[strings.ToLower(*p.ID)] = append(pools[strings.ToLower(*p.ID)],
					fmt.Sprintf("%s=%s", *a.Properties.IPAddress, *a.Properties.AdminState))
			}
		}
		for _, r := range lb.Properties.LoadBalancingRules {
			if strings.HasPrefix(*r.Name, "zd-") {
				ips := pools[strings.ToLower(*r.Properties.BackendAddressPool.ID)]
				sort.Strings(ips)
				out[name+"/"+*r.Name] = append([]string{}, ips...)
			}
		}
	}
	return out
}

// desiredState is what the objects ask for, in emulatorState's terms: per
// Service port, its ready endpoints, active ("None"), on the load balancer
// placed.
func desiredState(t *testing.T, c client.Client, ns string, placed map[string]string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range svcs.Items {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: s.Name}); err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, sl := range slices.Items {
			for _, ep := range sl.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, true) && !ptr.Deref(ep.Conditions.Terminating, false) {
					ips = append(ips, ep.Addresses[0]+"=None")
				}
			}
		}
		sort.Strings(ips)
		for _, p := range s.Spec.Ports {
			out[fmt.Sprintf("%s/zd-%s.%s.tcp-%d", placed[s.Name], ns, s.Name, p.Port)] = append([]string{}, ips...)
		}
	}
	return out
}

func isConflict(err error) bool { return apierrors.IsConflict(err) }
