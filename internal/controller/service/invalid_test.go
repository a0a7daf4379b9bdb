package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

func configValid(t *testing.T, c client.Client, ns, name string) *metav1.Condition {
	t.Helper()
	var got corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(got.Status.Conditions, service.ConditionConfigValid)
}

// updateService changes a Service, retrying while the controller's status
// writes conflict with it.
func updateService(t *testing.T, c client.Client, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var svc corev1.Service
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return err
		}
		mutate(&svc)
		return c.Update(context.Background(), &svc)
	})
	if err != nil {
		t.Fatalf("update service %s/%s: %v", ns, name, err)
	}
}

// TestInvalidAnnotationKeepsListenerBackendsFollow (invariant 7): a bad
// annotation yields ConfigValid=False and a Warning Event; the listener keeps
// its last good settings (the probe interval), while its backends keep
// following the endpoints, so that rollouts do not stall and deleted pods
// leave, drained first.
func TestInvalidAnnotationKeepsListenerBackendsFollow(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	svc := lbService(ns, "api", "zerodrop.dev/memory", map[string]string{model.AnnotationHealthCheckInterval: "500ms"})
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "api", 8080, "10.2.0.1", "10.2.0.2")); err != nil {
		t.Fatal(err)
	}
	r := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 30*time.Second, "two backends", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/api")
		return len(backendsOf(lb)) == 2, fmt.Sprint(backendsOf(lb))
	})
	good, _ := prov.Observe(ctx, ns+"/api")
	if len(good.Listeners) != 1 || good.Listeners[0].Probe.IntervalMillis != 500 {
		t.Fatalf("valid configuration not served: %+v", good.Listeners)
	}
	listener := good.Listeners[0].Name
	// The leaving backend keeps a connection, so its draining can be seen.
	prov.SetConnections(listener, "10.2.0.1:8080", 2)

	updateService(t, c, ns, "api", func(s *corev1.Service) {
		s.Annotations = map[string]string{model.AnnotationHealthCheckInterval: "bogus",
			model.AnnotationMaxUnavailable: "2147483648", "zerodrop.dev/colour": "blue"}
	})
	eventually(t, 30*time.Second, "ConfigValid=False naming every problem, and a Warning Event", func() (bool, string) {
		cond := configValid(t, c, ns, "api")
		evs := warningEvents(t, c, ns, "api")
		ok := cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == service.ReasonInvalidAnnotations &&
			strings.Contains(cond.Message, model.AnnotationHealthCheckInterval) &&
			strings.Contains(cond.Message, model.AnnotationMaxUnavailable) &&
			strings.Contains(cond.Message, "zerodrop.dev/colour") && len(evs) > 0
		return ok, fmt.Sprintf("cond=%+v events=%d", cond, len(evs))
	})

	// A rollout step while the annotation is bad: one endpoint goes, one comes.
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api-slice"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints[1:], discoveryv1.Endpoint{Addresses: []string{"10.2.0.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := c.Update(ctx, &sl); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.2.0.1:8080=draining", "10.2.0.2:8080=active", "10.2.0.3:8080=active"}
	eventually(t, 30*time.Second, "new backend added, removed one draining", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/api")
		return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(want), fmt.Sprint(backendsOf(lb))
	})
	prov.SetConnections(listener, "10.2.0.1:8080", 0)
	eventually(t, 30*time.Second, "drained backend removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/api")
		return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(want[1:]), fmt.Sprint(backendsOf(lb))
	})
	now, _ := prov.Observe(ctx, ns+"/api")
	if !now.Listeners[0].SameFrontend(good.Listeners[0]) {
		t.Errorf("the invalid annotation changed the listener: %+v -> %+v", good.Listeners[0], now.Listeners[0])
	}
	if cond := configValid(t, c, ns, "api"); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("ConfigValid = %+v, want False", cond)
	}
	r.stop(t)
}

// TestLongEventNoteIsStored: the API refuses Event notes over 1,024 bytes; an
// annotation value echoed whole in the note must not lose the Warning Event.
func TestLongEventNoteIsStored(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	// Two-byte runes, so that a cut at a byte count can split one.
	long := strings.Repeat("ü", 2600)
	if err := c.Create(ctx, lbService(ns, "long", "zerodrop.dev/memory", map[string]string{model.AnnotationHealthCheckInterval: long})); err != nil {
		t.Fatal(err)
	}
	r := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 30*time.Second, "ConfigValid=False", func() (bool, string) {
		cond := configValid(t, c, ns, "long")
		return cond != nil && cond.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", cond)
	})
	eventually(t, 30*time.Second, "a Warning Event stored in the API", func() (bool, string) {
		evs := warningEvents(t, c, ns, "long")
		return len(evs) > 0, fmt.Sprintf("%d Warning Events", len(evs))
	})
	for _, e := range warningEvents(t, c, ns, "long") {
		if len(e.Note) > 1024 || !utf8.ValidString(e.Note) || !strings.HasSuffix(e.Note, "…") ||
			!strings.HasPrefix(e.Note, "invalid zerodrop annotations: "+model.AnnotationHealthCheckInterval) {
			t.Errorf("note (%d bytes, valid UTF-8 %v) = %.80q…", len(e.Note), utf8.ValidString(e.Note), e.Note)
		}
	}
	r.stop(t)
}
