package service_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// startControl runs a control role's Service controller alone with opts,
// as startService does, and returns its metrics.
func startControl(t *testing.T, cfg *rest.Config, opts service.Options) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	opts.Role, opts.Metrics = service.RoleControl, m
	startService(t, cfg, opts)
	return m
}

// quiet returns once the control role has made no look for 2 s: the
// looks an event brought are over, and the next comes from the next event
// (or the back-off). Waiting longer only makes a late look less likely; it
// cannot fail a test.
func quiet(m *metrics.Metrics) {
	for last, still := metrics.Sum(m.Reconciles), 0; still < 4; still++ {
		time.Sleep(500 * time.Millisecond)
		if now := metrics.Sum(m.Reconciles); now != last {
			last, still = now, -1
		}
	}
}

// TestWaitingServicesBackOff, on the real apiserver with the control role
// and no data-plane replica counting (an empty DaemonSet): the Services
// wait, and their load balancers are looked at less and less often, at
// most every MaxReplicaWait (1 s here) once they have waited that long —
// not every DrainPollInterval (100 ms here). At 10,000 Services a look
// every second each took more than a core of an idle control role.
// Counted, not timed: the looks (zerodrop_reconcile_total) over a few
// seconds are bounded by the back-off; a loaded machine makes fewer, not
// more. A look every poll interval makes about 50 a key in the window.
func TestWaitingServicesBackOff(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class, n = "default", "zerodrop.dev/memory", 10
	m := startControl(t, cfg, service.Options{Provider: memory.New(provider.Hooks{}),
		Replicas:          func(context.Context) ([]lbtarget.Replica, error) { return nil, nil },
		DrainPollInterval: 100 * time.Millisecond, MaxReplicaWait: time.Second, ResyncPeriod: time.Hour,
		AddressPool: netip.MustParsePrefix("127.0.104.0/24")})
	for i := range n {
		if err := c.Create(ctx, lbService(ns, fmt.Sprintf("wait-%d", i), class, nil)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "every Service with its address, Ready False, its load balancer waiting", func() (bool, string) {
		for i := range n {
			var svc corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("wait-%d", i)}, &svc); err != nil {
				return false, err.Error()
			}
			ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)
			if len(svc.Status.LoadBalancer.Ingress) == 0 || ready == nil || ready.Reason != service.ReasonDataPlanePending {
				return false, fmt.Sprintf("%s: ingress %v, Ready %+v", svc.Name, svc.Status.LoadBalancer.Ingress, ready)
			}
		}
		waiting := promtest.ToFloat64(m.WaitingForReplicas)
		return waiting == n, fmt.Sprintf("%v load balancers waiting", waiting)
	})
	// Past the back-off's first steps (100 ms, 200, 400, 800): from here
	// a key is looked at every second at most.
	time.Sleep(2 * time.Second)
	mark := metrics.Sum(m.Reconciles)
	const window, most = 5 * time.Second, 10
	time.Sleep(window)
	if looks := metrics.Sum(m.Reconciles) - mark; looks > most*n {
		t.Errorf("%v looks at %d waiting load balancers in %s: want at most %d a key (about one a second; one every 100 ms would be about 50)",
			looks, n, window, most)
	}
	if got := promtest.ToFloat64(m.WaitingForReplicas); got != n {
		t.Errorf("zerodrop_load_balancers_waiting_for_replicas %v, want %d", got, n)
	}
}

// TestReplicaPodWakesWaitingServices, on the real apiserver with the
// control role: the Services' load balancers wait for the data-plane
// replicas with a back-off that would put their next look an hour off
// (DrainPollInterval 1 h), and a replica pod's change looks at them at
// once. First no replica counts; a replica pod turns up (counted, as
// Discovery counts it, from the pods the selector matches) and the next
// looks name it, not yet serving. Then a real data-plane controller
// builds its load balancers, and the replica's pod turning Ready (as a
// replica does once it serves every Service) makes every Service Ready.
func TestReplicaPodWakesWaitingServices(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class, n = "default", "zerodrop.dev/memory", 4
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "data-plane"})
	pool := netip.MustParsePrefix("127.0.105.0/24")
	// The replica's HAProxy: the data-plane controller started below
	// writes it, the control role reads it as each replica pod's.
	dp := memory.New(provider.Hooks{})
	replicas := func(ctx context.Context) ([]lbtarget.Replica, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		var out []lbtarget.Replica
		for _, p := range pods.Items {
			out = append(out, lbtarget.Replica{Name: p.Name, Provider: dp})
		}
		return out, nil
	}
	m := startControl(t, cfg, service.Options{Provider: memory.New(provider.Hooks{}), Replicas: replicas,
		ReplicaNamespace: ns, ReplicaSelector: sel,
		DrainPollInterval: time.Hour, ResyncPeriod: time.Hour, AddressPool: pool})
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("woken-%d", i)
		if err := c.Create(ctx, lbService(ns, names[i], class, nil)); err != nil {
			t.Fatal(err)
		}
	}
	// ready is every Service's Ready condition as status and message.
	ready := func(name string) (metav1.ConditionStatus, string) {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return "", err.Error()
		}
		if r := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady); r != nil {
			return r.Status, r.Message
		}
		return "", "no Ready condition"
	}
	every := func(what string, ok func(status metav1.ConditionStatus, msg string) bool) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() (bool, string) {
			for _, name := range names {
				if status, msg := ready(name); !ok(status, msg) {
					return false, fmt.Sprintf("%s: Ready %s, %q; %v load balancers waiting", name, status, msg, promtest.ToFloat64(m.WaitingForReplicas))
				}
			}
			return true, ""
		})
	}
	every("every Service waiting for a replica, none counting", func(status metav1.ConditionStatus, msg string) bool {
		return status == metav1.ConditionFalse && strings.Contains(msg, "no data-plane replica counts")
	})
	eventually(t, 60*time.Second, "every load balancer waiting", func() (bool, string) {
		got := promtest.ToFloat64(m.WaitingForReplicas)
		return got == n, fmt.Sprintf("%v waiting", got)
	})
	// The looks its own writes (finalizer, status) bring are over: a look
	// still queued would see the replica below without a wake.
	quiet(m)

	// A replica pod turns up: its replica counts, and serves nothing yet.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dp-a",
		Labels: map[string]string{"app.kubernetes.io/component": "data-plane"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "haproxy", Image: "haproxy"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	every("every Service looked at again, waiting for dp-a", func(status metav1.ConditionStatus, msg string) bool {
		return status == metav1.ConditionFalse && strings.Contains(msg, "dp-a (listener")
	})

	// The replica builds its load balancers from the Services' status,
	// once the looks the pod brought are over.
	quiet(m)
	startService(t, cfg, service.Options{Provider: dp, Role: service.RoleDataPlane, AddressPool: pool, ResyncPeriod: time.Hour})
	eventually(t, 60*time.Second, "the replica serving every Service", func() (bool, string) {
		for _, name := range names {
			if lb, err := dp.Observe(ctx, ns+"/"+name); err != nil || lb == nil || len(lb.Listeners) == 0 {
				return false, fmt.Sprintf("%s: %+v, %v", name, lb, err)
			}
		}
		return true, ""
	})
	// Its pod turns Ready: every Service is looked at, and is Ready.
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	every("every Service Ready after the replica's pod changed", func(status metav1.ConditionStatus, msg string) bool {
		return status == metav1.ConditionTrue
	})
	eventually(t, 60*time.Second, "no load balancer waiting", func() (bool, string) {
		got := promtest.ToFloat64(m.WaitingForReplicas)
		return got == 0, fmt.Sprintf("%v waiting", got)
	})
}
