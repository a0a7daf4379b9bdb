package azure_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/testutil"
)

var lbNames = []string{"lb-a", "lb-b"}

// placement maps each Service of ns to its load balancer, as KeyFunc does.
func placement(t *testing.T, c client.Client, p *azure.Provider, ns string) map[string]string {
	t.Helper()
	var list corev1.ServiceList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i := range list.Items {
		out[list.Items[i].Name] = p.KeyFunc(&list.Items[i])
	}
	return out
}

// waitConverged waits until the emulator holds exactly what the objects ask
// for and every Service has its Azure-assigned address in status.
func waitConverged(t *testing.T, c client.Client, emu *azurearm.Emulator, r *running, ns string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, "the load balancers to match the objects", func() (bool, string) {
		want := desiredState(t, c, ns, placement(t, c, r.prov, ns))
		got := emulatorState(emu, lbNames...)
		for k := range got {
			if _, ok := want[k]; !ok && strings.Contains(k, "/zd-"+ns+".") {
				return false, fmt.Sprintf("extra rule %s", k)
			}
		}
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) && !(len(v) == 0 && len(got[k]) == 0) {
				return false, fmt.Sprintf("%s: got %v, want %v", k, got[k], v)
			}
		}
		var list corev1.ServiceList
		_ = c.List(context.Background(), &list, client.InNamespace(ns))
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) != 1 || !meta.IsStatusConditionTrue(s.Status.Conditions, service.ConditionReady) {
				return false, fmt.Sprintf("%s: status %+v", s.Name, s.Status)
			}
		}
		return true, ""
	})
}

// TestRestartWritesNothing is invariant 1 on Azure: a new controller (a
// restart, a new leader) with nothing changed makes no PUT; the
// upstream-like full sync does.
func TestRestartWritesNothing(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "restart")
	emu := azurearm.New(azurearm.Options{})
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("web-%d", i)
		if err := c.Create(ctx, lbService(ns, name, "", i%3 == 0)); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, endpointSlice(ns, name, fmt.Sprintf("10.1.%d.1", i), fmt.Sprintf("10.1.%d.2", i))); err != nil {
			t.Fatal(err)
		}
	}
	first := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, first, ns, 30*time.Second)
	used := map[string]bool{}
	for _, lb := range placement(t, c, first.prov, ns) {
		used[lb] = true
	}
	if len(used) != 2 {
		t.Errorf("8 Services on %d load balancer(s), want both used", len(used))
	}
	time.Sleep(500 * time.Millisecond)
	first.stop(t)

	before := emu.Counters()
	second := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	testutil.Eventually(t, 20*time.Second, "both load balancers reconciled", func() (bool, string) {
		n := metrics.Sum(second.metrics.Reconciles)
		return n >= 2, fmt.Sprintf("reconciles=%v", n)
	})
	time.Sleep(time.Second)
	d := emu.Counters().Sub(before)
	if w := metrics.Sum(second.metrics.ProviderWrites); w != 0 || d.Puts()+d.Deletes != 0 {
		t.Errorf("restart with nothing changed: zerodrop_provider_writes_total=%v, emulator %+v; want no write", w, d)
	}
	t.Logf("restart: %d GETs, %d PUTs", d.Gets, d.Puts())
	second.stop(t)

	before = emu.Counters()
	full := startController(t, cfg, emu, ns, service.SyncFull, lbNames...)
	testutil.Eventually(t, 20*time.Second, "the full sync to write", func() (bool, string) {
		d := emu.Counters().Sub(before)
		return d.LBPuts >= 2, fmt.Sprintf("%+v", d)
	})
	full.stop(t)
}

// TestEndpointChurnRace is the race of the issue report: EndpointSlice churn
// on a Local Service while the Service itself changes and a second Service
// on the same load balancer changes too. With one work item per load
// balancer nothing conflicts, and no backend is lost.
func TestEndpointChurnRace(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "race")
	emu := azurearm.New(azurearm.Options{})
	local := lbService(ns, "local", "lb-a", false)
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	for _, s := range []*corev1.Service{local, lbService(ns, "web", "lb-a", true)} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*discoveryv1.EndpointSlice{endpointSlice(ns, "local", "10.2.0.1", "10.2.0.2"), endpointSlice(ns, "web", "10.3.0.1")} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 30*time.Second)
	before := emu.Counters()

	churn(t, c, ns, 6*time.Second)
	waitConverged(t, c, emu, r, ns, 60*time.Second)

	d := emu.Counters().Sub(before)
	if d.PreconditionFailed != 0 || metrics.Sum(r.metrics.ProviderConflicts) != 0 {
		t.Errorf("%d 412s, %v conflicts: two writers on one load balancer", d.PreconditionFailed, metrics.Sum(r.metrics.ProviderConflicts))
	}
	if n := metrics.Sum(r.metrics.ProviderErrors); n != 0 {
		t.Errorf("%v provider errors", n)
	}
	for _, e := range warnings(t, c, ns) {
		t.Errorf("Warning Event %s on %s: %s", e.Reason, e.Regarding.Name, e.Note)
	}
	t.Logf("churn: %+v", d)
	r.stop(t)
}

// churn changes, for a while and all at once: the Local Service's endpoints
// every 20ms (some drain: terminating but serving), the Local Service itself
// (a port comes and goes), and the other Service's endpoints and probe. It
// ends with every endpoint ready.
func churn(t *testing.T, c client.Client, ns string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	every := func(period time.Duration, f func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				// The client's rate limiter refuses a wait that would outlast
				// ctx before ctx ends: that is the window closing too.
				if err := f(i); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "would exceed context deadline") {
					t.Errorf("churn: %v", err)
					return
				}
				time.Sleep(period)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	every(20*time.Millisecond, func(i int) error {
		return update(ctx, c, &discoveryv1.EndpointSlice{}, ns, "local-slice", func(o client.Object) {
			s := o.(*discoveryv1.EndpointSlice)
			n := 2 + rng.IntN(3)
			s.Endpoints = nil
			for j := 0; j < n; j++ {
				ep := discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.2.%d.%d", i%4, j+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
				if j == 0 && i%3 == 0 {
					ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
				}
				s.Endpoints = append(s.Endpoints, ep)
			}
		})
	})
	every(400*time.Millisecond, func(i int) error {
		return update(ctx, c, &corev1.Service{}, ns, "local", func(o client.Object) {
			s := o.(*corev1.Service)
			if i%2 == 0 {
				https := corev1.ServicePort{Name: "https", Port: 443, TargetPort: s.Spec.Ports[0].TargetPort, Protocol: corev1.ProtocolTCP}
				https.TargetPort.IntVal = 8443
				s.Spec.Ports = append(s.Spec.Ports[:1], https)
			} else {
				s.Spec.Ports = s.Spec.Ports[:1]
			}
		})
	})
	every(300*time.Millisecond, func(i int) error {
		if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, "web-slice", func(o client.Object) {
			s := o.(*discoveryv1.EndpointSlice)
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.3.0.%d", i%5+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
		}); err != nil {
			return err
		}
		return update(ctx, c, &corev1.Service{}, ns, "web", func(o client.Object) {
			o.GetAnnotations()[model.AnnotationHealthCheckInterval] = []string{"2s", "7s"}[i%2]
		})
	})
	wg.Wait()
	// The end state: every endpoint ready.
	if err := update(context.Background(), c, &discoveryv1.EndpointSlice{}, ns, "local-slice", func(o client.Object) {
		for i := range o.(*discoveryv1.EndpointSlice).Endpoints {
			o.(*discoveryv1.EndpointSlice).Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(true)}
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// update gets, changes and updates an object, retrying on write conflicts.
func update(ctx context.Context, c client.Client, obj client.Object, ns, name string, change func(client.Object)) error {
	for {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return err
		}
		change(obj)
		err := c.Update(ctx, obj)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !isConflict(err) {
			return err
		}
	}
}

// TestTransientFaultsConverge: with 20% of Azure requests failing (412 from
// a foreign write, 429, 500, slow), the controller converges, loses no
// backend and raises no failure Event.
func TestTransientFaultsConverge(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "faults")
	emu := azurearm.New(azurearm.Options{Seed: 20, Faults: azurearm.Faults{Rate: 0.2, Cooldown: 3, SlowDelay: 50 * time.Millisecond}})
	local := lbService(ns, "local", "lb-a", false)
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	objs := []client.Object{local, lbService(ns, "web", "lb-a", true), endpointSlice(ns, "local", "10.2.0.1", "10.2.0.2"), endpointSlice(ns, "web", "10.3.0.1")}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("other-%d", i)
		objs = append(objs, lbService(ns, name, "", false), endpointSlice(ns, name, fmt.Sprintf("10.4.%d.1", i)))
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 60*time.Second)
	churn(t, c, ns, 6*time.Second)
	waitConverged(t, c, emu, r, ns, 90*time.Second)

	// How many requests the run makes depends on how changes coalesce, so
	// the check is relative: with Rate 0.2 and a cooldown of 3 about a tenth
	// of the requests fail, of at least two kinds.
	cnt := emu.Counters()
	faults := cnt.InjectedConflicts + cnt.Throttled + cnt.ServerErrors + cnt.Slow
	kinds := 0
	for _, n := range []int{cnt.InjectedConflicts, cnt.Throttled, cnt.ServerErrors, cnt.Slow} {
		if n > 0 {
			kinds++
		}
	}
	if requests := cnt.Gets + cnt.Puts() + cnt.Deletes; faults*20 < requests || kinds < 2 {
		t.Errorf("too few faults injected to mean anything (%d of %d requests, %d kinds): %+v", faults, requests, kinds, cnt)
	}
	for _, e := range warnings(t, c, ns) {
		if e.Reason == service.ReasonSyncFailed {
			t.Errorf("failure Event for transient faults on %s: %s", e.Regarding.Name, e.Note)
		}
	}
	t.Logf("faults: %+v; conflicts re-planned %v", cnt, metrics.Sum(r.metrics.ProviderConflicts))
	r.stop(t)
}

// TestBadAnnotationsChangeNothing is invariant 7 on Azure: a bad zerodrop
// annotation, or a load balancer annotation naming no configured load
// balancer, gives a Warning Event and ConfigValid=False, and the load
// balancer is not written. (The backends of an invalid Service still follow
// its endpoints; the service controller's tests cover that.)
func TestBadAnnotationsChangeNothing(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "invalid")
	emu := azurearm.New(azurearm.Options{})
	for _, name := range []string{"bad-interval", "bad-lb"} {
		if err := c.Create(ctx, lbService(ns, name, "lb-a", false)); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, endpointSlice(ns, name, "10.5.0.1", "10.5.0.2")); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 30*time.Second)
	good, _ := emu.LoadBalancer(group, "lb-a")
	before := emu.Counters()

	bad := map[string][2]string{
		"bad-interval": {model.AnnotationHealthCheckInterval, "fast"},
		"bad-lb":       {azure.AnnotationLoadBalancer, "lb-typo"},
	}
	for name, kv := range bad {
		if err := update(ctx, c, &corev1.Service{}, ns, name, func(o client.Object) { o.GetAnnotations()[kv[0]] = kv[1] }); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "ConfigValid=False and a Warning Event on both", func() (bool, string) {
		for name := range bad {
			var s corev1.Service
			_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
			cond := meta.FindStatusCondition(s.Status.Conditions, service.ConditionConfigValid)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != service.ReasonInvalidAnnotations {
				return false, fmt.Sprintf("%s: %+v", name, cond)
			}
			found := false
			for _, e := range warnings(t, c, ns) {
				found = found || e.Regarding.Name == name && e.Reason == service.ReasonInvalidAnnotations
			}
			if !found {
				return false, name + ": no Warning Event"
			}
		}
		return true, ""
	})
	time.Sleep(time.Second)
	now, _ := emu.LoadBalancer(group, "lb-a")
	if d := emu.Counters().Sub(before); *now.Etag != *good.Etag || d.Puts()+d.Deletes != 0 {
		t.Fatalf("bad annotations changed the load balancer: %+v", d)
	}
	r.stop(t)
}

// TestConflictsRetrySilently: every write first meets a foreign write (its
// If-Match fails with 412); the controller re-reads, re-plans and retries,
// converges, and raises no Event.
func TestConflictsRetrySilently(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "conflicts")
	// Rate 1 with only the conflict kind: every write is preceded by a
	// foreign write, except within the Cooldown requests after one (a
	// reconcile's GET and PUT).
	emu := azurearm.New(azurearm.Options{Faults: azurearm.Faults{Rate: 1, Conflict: 1, Cooldown: 2}})
	for _, o := range []client.Object{lbService(ns, "web", "lb-a", false), endpointSlice(ns, "web", "10.6.0.1")} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 30*time.Second)
	if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, "web-slice", func(o client.Object) {
		o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] = "10.6.0.2"
	}); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, emu, r, ns, 30*time.Second)
	cnt := emu.Counters()
	if cnt.PreconditionFailed < 2 || metrics.Sum(r.metrics.ProviderConflicts) < 2 {
		t.Errorf("412s = %d, conflicts = %v; want every write to have met one", cnt.PreconditionFailed, metrics.Sum(r.metrics.ProviderConflicts))
	}
	for _, e := range warnings(t, c, ns) {
		t.Errorf("Warning Event %s: %s", e.Reason, e.Note)
	}
	r.stop(t)
}
