package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const haproxyClass = "zerodrop.dev/haproxy"

// haproxyFor attaches a provider to the HAProxy of dir (starting it the first
// time), counting on m; the HAProxy is stopped when the test ends.
func haproxyFor(t *testing.T, dir string, m *metrics.Metrics) *haproxy.Provider {
	t.Helper()
	p, err := haproxy.New(context.Background(), haproxy.Options{Dir: dir, Hooks: m.ProviderHooks("haproxy"), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, done := stopping.LoadOrStore(dir, true); !done {
		t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	}
	return p
}

// stopping remembers the state dirs whose HAProxy a cleanup already stops.
var stopping sync.Map

func newMetrics(t *testing.T) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func workers(t *testing.T, p *haproxy.Provider) []int {
	t.Helper()
	_, w, _, err := p.Procs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sort.Ints(w)
	return w
}

func ingressOf(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	var svc corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return ""
	}
	return svc.Status.LoadBalancer.Ingress[0].IP
}

// awaitIngress waits until the Service has an address in its status and
// returns it. A pod's readiness gate opens once the load balancer serves the
// pod, which can be before the controller has written the Service's status
// (seen on a loaded machine), so a test that goes from a gate to the
// Service's address waits for the address too.
func awaitIngress(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	var ip string
	eventually(t, 30*time.Second, "the Service's address in its status", func() (bool, string) {
		ip = ingressOf(t, c, ns, name)
		return ip != "", "no ingress yet"
	})
	return ip
}

// TestHAProxyTrafficScaleAndRestart is issue 3's end-to-end test on the real
// apiserver and a real HAProxy: traffic reaches loopback backends; scaling
// changes HAProxy at run time (no reload: same worker PID, a long-lived
// connection stays open); a new controller against unchanged objects writes
// nothing, while --sync=full writes.
func TestHAProxyTrafficScaleAndRestart(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	const ns, app = "default", "web"
	port, lbPort := freePort(t), freePort(t)

	backends := map[string]*backend{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("pod-%d", i)
		backends[name] = startBackend(t, name, fmt.Sprintf("127.18.0.%d:%d", i, port))
	}
	if err := c.Create(ctx, lbService(ns, app, haproxyClass, int32(lbPort), int32(port))); err != nil {
		t.Fatal(err)
	}
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.0.1"), readyEndpoint("198.18.0.2"))

	m1 := newMetrics(t)
	p1 := haproxyFor(t, dir, m1)
	ctrl := startController(t, cfg, p1, m1, controllerOptions{sync: service.SyncIncremental})

	var lbAddr string
	eventually(t, 30*time.Second, "traffic through HAProxy to both backends", func() (bool, string) {
		ip := ingressOf(t, c, ns, app)
		if ip == "" {
			return false, "no ingress yet"
		}
		lbAddr = net.JoinHostPort(ip, strconv.Itoa(lbPort))
		seen := map[string]bool{}
		for i := 0; i < 6; i++ {
			name, err := get("http://" + lbAddr + "/")
			if err != nil {
				return false, err.Error()
			}
			seen[name] = true
		}
		return seen["pod-1"] && seen["pod-2"], fmt.Sprint(seen)
	})

	long, err := dialLong(lbAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer long.conn.Close()
	first, err := long.roundTrip()
	if err != nil {
		t.Fatal(err)
	}
	pids := workers(t, p1)

	// Scale up to three, then down to the backend the long connection uses.
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.0.1"), readyEndpoint("198.18.0.2"), readyEndpoint("198.18.0.3"))
	eventually(t, 20*time.Second, "third backend serving", func() (bool, string) {
		name, err := get("http://" + lbAddr + "/")
		return err == nil && name == "pod-3", fmt.Sprint(name, err)
	})
	keep := map[string]string{"pod-1": "198.18.0.1", "pod-2": "198.18.0.2"}[first]
	setSlice(t, c, ns, app, int32(port), readyEndpoint(keep))
	eventually(t, 20*time.Second, "only "+first+" serving", func() (bool, string) {
		lb, _ := p1.Observe(ctx, ns+"/"+app)
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	for i := 0; i < 5; i++ {
		if name, err := get("http://" + lbAddr + "/"); err != nil || name != first {
			t.Fatalf("after scale-down request %d went to %q (%v), want %s", i, name, err, first)
		}
	}
	if got, err := long.roundTrip(); err != nil || got != first {
		t.Fatalf("long-lived connection broken by scaling: %q %v", got, err)
	}
	if now := workers(t, p1); fmt.Sprint(now) != fmt.Sprint(pids) {
		t.Fatalf("scaling reloaded HAProxy: workers %v -> %v", pids, now)
	}
	if w := metrics.Sum(m1.ProviderWrites.WithLabelValues("haproxy", "reload")); w != 1 {
		t.Errorf("reloads = %v, want 1 (the listener's creation only)", w)
	}
	time.Sleep(500 * time.Millisecond)
	ctrl.stop(t)

	// A new controller (restart / new leader), nothing changed: zero writes.
	m2 := newMetrics(t)
	p2 := haproxyFor(t, dir, m2)
	ctrl2 := startController(t, cfg, p2, m2, controllerOptions{sync: service.SyncIncremental})
	eventually(t, 20*time.Second, "restarted controller to verify", func() (bool, string) {
		n := metrics.Sum(m2.Reconciles)
		return n >= 1, "reconciles=" + strconv.Itoa(int(n))
	})
	time.Sleep(time.Second)
	if w := metrics.Sum(m2.ProviderWrites); w != 0 {
		t.Errorf("restart with nothing changed made %v HAProxy writes, want 0", w)
	}
	if got, err := long.roundTrip(); err != nil || got != first {
		t.Fatalf("long-lived connection broken by the restart: %q %v", got, err)
	}
	ctrl2.stop(t)

	// The upstream-like mode rewrites everything on start.
	m3 := newMetrics(t)
	p3 := haproxyFor(t, dir, m3)
	ctrl3 := startController(t, cfg, p3, m3, controllerOptions{sync: service.SyncFull})
	eventually(t, 20*time.Second, "--sync=full to write", func() (bool, string) {
		w := metrics.Sum(m3.ProviderWrites)
		return w > 0, fmt.Sprintf("writes=%v", w)
	})
	ctrl3.stop(t)
	t.Logf("restart writes: incremental %v, full %v", metrics.Sum(m2.ProviderWrites), metrics.Sum(m3.ProviderWrites))
}
