package service_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// withPorts gives svc n TCP ports, 80 "http" first.
func withPorts(svc *corev1.Service, n int) *corev1.Service {
	svc.Spec.Ports = nil
	for i := 0; i < n; i++ {
		name := "http"
		if i > 0 {
			name = fmt.Sprintf("p%d", 80+i)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Port: int32(80 + i),
			TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP})
	}
	return svc
}

func listenerNames(lb *model.LoadBalancer) []string {
	var out []string
	if lb != nil {
		for _, l := range lb.Listeners {
			out = append(out, l.Name)
		}
	}
	return out
}

func limits(mutate func(*model.Limits)) func(*controller.Config) {
	return func(c *controller.Config) { mutate(&c.Limits) }
}

// TestPortCapRefusesNewKeepsServing (issue 46, M8, and its upgrade rule): a
// Service over --max-ports-per-service created while the cap holds is
// refused — a Warning Event, ConfigValid=False, nothing served, no address —
// while one that was served before the cap existed keeps serving its
// listeners as they were, backends following its endpoints, with a Warning
// Event, the condition and zerodrop_services_over_limit; a change that
// would add a port is refused, one that brings it under the cap is served.
func TestPortCapRefusesNewKeepsServing(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	class := "zerodrop.dev/memory"

	// Before the cap: "wide" has three ports and is served on all three.
	if err := c.Create(ctx, withPorts(lbService(ns, "wide", class, nil), 3)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "wide", 8080, "10.7.0.1", "10.7.0.2")); err != nil {
		t.Fatal(err)
	}
	before := startReplica(t, cfg, replica{prov: prov, configure: limits(func(l *model.Limits) { l.MaxPorts = 0 })})
	eventually(t, 30*time.Second, "three listeners served and Ready", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/wide")
		var got corev1.Service
		_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wide"}, &got)
		return len(listenerNames(lb)) == 3 && len(backendsOf(lb)) == 2 &&
				meta.IsStatusConditionTrue(got.Status.Conditions, service.ConditionReady),
			fmt.Sprint(listenerNames(lb), backendsOf(lb))
	})
	served, _ := prov.Observe(ctx, ns+"/wide")
	before.stop(t)

	// The upgrade: the cap is two ports. "fresh" asks for three.
	if err := c.Create(ctx, withPorts(lbService(ns, "fresh", class, nil), 3)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "fresh", 8080, "10.7.1.1")); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, cfg, replica{prov: prov, configure: limits(func(l *model.Limits) { l.MaxPorts = 2 })})
	for _, name := range []string{"fresh", "wide"} {
		eventually(t, 30*time.Second, name+": ConfigValid=False OverLimit and a Warning Event", func() (bool, string) {
			cond := configValid(t, c, ns, name)
			evs := warningEvents(t, c, ns, name)
			over := false
			for _, e := range evs {
				over = over || e.Reason == service.ReasonOverLimit
			}
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == service.ReasonOverLimit &&
				strings.Contains(cond.Message, "over the cap of 2") && over, fmt.Sprintf("cond=%+v events=%d", cond, len(evs))
		})
	}
	eventually(t, 10*time.Second, "zerodrop_services_over_limit{limit=ports} 2", func() (bool, string) {
		v := promtest.ToFloat64(r.metrics.ServicesOverLimit.WithLabelValues(model.LimitPorts))
		return v == 2, fmt.Sprint(v)
	})
	if lb, _ := prov.Observe(ctx, ns+"/fresh"); len(listenerNames(lb)) > 0 {
		t.Errorf("a Service over the cap created under it is served: %v", listenerNames(lb))
	}
	var fresh corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fresh"}, &fresh); err != nil {
		t.Fatal(err)
	}
	if len(fresh.Status.LoadBalancer.Ingress) > 0 {
		t.Errorf("a refused Service got an address: %+v", fresh.Status.LoadBalancer)
	}

	// A change that adds a port is refused; the backends still follow.
	updateService(t, c, ns, "wide", func(s *corev1.Service) { withPorts(s, 4) })
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wide-slice"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.7.0.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := c.Update(ctx, &sl); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new endpoint a backend of the kept listener", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/wide")
		return len(backendsOf(lb)) == 3, fmt.Sprint(backendsOf(lb))
	})
	now, _ := prov.Observe(ctx, ns+"/wide")
	if fmt.Sprint(listenerNames(now)) != fmt.Sprint(listenerNames(served)) {
		t.Errorf("listeners changed while over the cap: %v -> %v", listenerNames(served), listenerNames(now))
	}
	for i := range now.Listeners {
		if i < len(served.Listeners) && !now.Listeners[i].SameFrontend(served.Listeners[i]) {
			t.Errorf("listener %s changed while over the cap: %+v -> %+v", now.Listeners[i].Name, served.Listeners[i], now.Listeners[i])
		}
	}

	// Under the cap again: served as asked, ConfigValid True.
	updateService(t, c, ns, "wide", func(s *corev1.Service) { withPorts(s, 2) })
	eventually(t, 30*time.Second, "two listeners and ConfigValid=True", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/wide")
		cond := configValid(t, c, ns, "wide")
		return len(listenerNames(lb)) == 2 && cond != nil && cond.Status == metav1.ConditionTrue,
			fmt.Sprintf("%v cond=%+v", listenerNames(lb), cond)
	})
	eventually(t, 10*time.Second, "zerodrop_services_over_limit{limit=ports} 1", func() (bool, string) {
		v := promtest.ToFloat64(r.metrics.ServicesOverLimit.WithLabelValues(model.LimitPorts))
		return v == 1, fmt.Sprint(v)
	})
	r.stop(t)
}

// budgetWatch is the memory provider with the check rate of everything it
// serves measured after every write, under one lock: the highest total any
// write left is what a data-plane replica would have run.
type budgetWatch struct {
	*memory.Provider
	mu     sync.Mutex
	keys   map[string]bool
	peak   float64
	writes int
}

func (w *budgetWatch) total(ctx context.Context) float64 {
	sum := 0.0
	for key := range w.keys {
		lb, _ := w.Provider.Observe(ctx, key)
		sum += model.CheckRate(lb)
	}
	return sum
}

func (w *budgetWatch) Apply(ctx context.Context, plan model.Plan) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.Provider.Apply(ctx, plan)
	w.keys[plan.Key] = true
	w.writes++
	w.peak = max(w.peak, w.total(ctx))
	return err
}

func (w *budgetWatch) Delete(ctx context.Context, key string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.Provider.Delete(ctx, key)
}

func (w *budgetWatch) stats() (peak float64, writes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, w.writes
}

func intervals(ctx context.Context, p provider.Provider, ns string, names ...string) string {
	var out []string
	for _, n := range names {
		lb, _ := p.Observe(ctx, ns+"/"+n)
		for _, l := range lb.Listeners {
			out = append(out, fmt.Sprintf("%s=%d", n, l.Probe.IntervalMillis))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestCheckBudgetNeverExceeded (issue 46, M8): with a per-replica budget of
// 20 checks a second, three Services asking 10, 8 and 12 (backends at a 1 s
// interval) are served with every backend, the newest one's interval
// stretched (8 s: 1.5 a second in the 2 left), a Warning Event and condition
// on it and zerodrop_health_check_stretched_services 1; no write ever leaves
// the provider running more than the budget; a restart writes nothing; and
// when the oldest goes, the newest is checked as asked again.
func TestCheckBudgetNeverExceeded(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	w := &budgetWatch{Provider: memory.New(provider.Hooks{}), keys: map[string]bool{}}
	const ns, budget = "default", 20.0
	class := "zerodrop.dev/memory"
	conf := limits(func(l *model.Limits) { l.NodeCheckBudget, l.MaxServiceCheckRate = budget, 0 })
	r := startReplica(t, cfg, replica{prov: w, configure: conf})

	services := []struct {
		name     string
		backends int
	}{{"a-old", 10}, {"b-mid", 8}, {"c-new", 12}}
	for i, s := range services {
		if err := c.Create(ctx, lbService(ns, s.name, class, map[string]string{model.AnnotationHealthCheckInterval: "1s"})); err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for j := 0; j < s.backends; j++ {
			addrs = append(addrs, fmt.Sprintf("10.8.%d.%d", i, j+1))
		}
		if err := c.Create(ctx, slice(ns, s.name, 8080, addrs...)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, s.name+" served with every backend", func() (bool, string) {
			lb, _ := w.Observe(ctx, ns+"/"+s.name)
			return len(backendsOf(lb)) == s.backends, fmt.Sprint(backendsOf(lb))
		})
	}
	want := "a-old=1000 b-mid=1000 c-new=8000"
	eventually(t, 30*time.Second, "the newest stretched, a Warning Event and condition on it", func() (bool, string) {
		cond := configValid(t, c, ns, "c-new")
		stretched := false
		for _, e := range warningEvents(t, c, ns, "c-new") {
			stretched = stretched || e.Reason == service.ReasonHealthChecksStretched
		}
		got := intervals(ctx, w, ns, "a-old", "b-mid", "c-new")
		return got == want && stretched && cond != nil && cond.Reason == service.ReasonHealthChecksStretched,
			fmt.Sprintf("%s event=%v cond=%+v", got, stretched, cond)
	})
	for _, name := range []string{"a-old", "b-mid"} {
		if cond := configValid(t, c, ns, name); cond == nil || cond.Status != metav1.ConditionTrue {
			t.Errorf("%s: ConfigValid %+v, want True (it does not yield)", name, cond)
		}
	}
	if v := promtest.ToFloat64(r.metrics.HealthCheckStretched); v != 1 {
		t.Errorf("zerodrop_health_check_stretched_services = %v, want 1", v)
	}
	if v := promtest.ToFloat64(r.metrics.HealthCheckRate); math.Abs(v-19.5) > 1e-9 {
		t.Errorf("zerodrop_health_checks_per_second = %v, want 19.5", v)
	}

	// A restart computes the same stretch before its first write: nothing
	// to write (invariant 1).
	r.stop(t)
	_, writes := w.stats()
	r = startReplica(t, cfg, replica{prov: w, configure: conf})
	eventually(t, 30*time.Second, "the restarted controller reconciled every Service", func() (bool, string) {
		v := promtest.ToFloat64(r.metrics.Reconciles.WithLabelValues("noop"))
		return v >= 3, fmt.Sprint(v)
	})
	if _, after := w.stats(); after != writes {
		t.Errorf("a restart wrote %d times; want none", after-writes)
	}

	// The oldest goes: the newest fits as asked again.
	if err := c.Delete(ctx, lbService(ns, "a-old", class, nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "c-new checked as asked", func() (bool, string) {
		got := intervals(ctx, w, ns, "b-mid", "c-new")
		cond := configValid(t, c, ns, "c-new")
		return got == "b-mid=1000 c-new=1000" && cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%s cond=%+v", got, cond)
	})
	if peak, _ := w.stats(); peak > budget {
		t.Errorf("a write left %v checks a second running, over the budget of %v", peak, budget)
	}
	r.stop(t)
}
