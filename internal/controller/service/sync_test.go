package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestNoPlanBeforeSync is invariant 4's "no plan before sync": a new leader
// whose EndpointSlice informer cannot sync (its user may not list
// EndpointSlices yet, so the reflector keeps retrying) must not reconcile an
// existing load balancer at all — with an empty EndpointSlice cache its pool
// would drain — and once the informer syncs it finds nothing to do.
func TestNoPlanBeforeSync(t *testing.T) {
	env := controlplane.StartEnv(t)
	c := newClient(t, env.Config)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns, key = "default", "default/sync"
	if err := c.Create(ctx, lbService(ns, "sync", "zerodrop.dev/memory", nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, slice(ns, "sync", 8080, "10.6.0.1", "10.6.0.2")); err != nil {
		t.Fatal(err)
	}
	first := startController(t, env.Config, prov, service.SyncIncremental)
	eventually(t, 30*time.Second, "the load balancer with two backends", func() (bool, string) {
		lb, _ := prov.Observe(ctx, key)
		return fmt.Sprint(backendsOf(lb)) == "[10.6.0.1:8080=active 10.6.0.2:8080=active]", fmt.Sprint(backendsOf(lb))
	})
	time.Sleep(500 * time.Millisecond) // let the first controller settle
	first.stop(t)
	writes, version := len(prov.Writes()), prov.Version(key)
	unchanged := func(when string) {
		t.Helper()
		lb, _ := prov.Observe(ctx, key)
		if got := fmt.Sprint(backendsOf(lb)); got != "[10.6.0.1:8080=active 10.6.0.2:8080=active]" {
			t.Errorf("%s: backends %s, want both still active", when, got)
		}
		if w := prov.Writes()[writes:]; len(w) != 0 {
			t.Errorf("%s: wrote %v", when, w)
		}
		if v := prov.Version(key); v != version {
			t.Errorf("%s: version %s -> %s: an Apply was made", when, version, v)
		}
	}

	// A user that may do everything the controller does except read
	// EndpointSlices.
	const userName = "zerodrop-no-slices"
	user, err := env.AddUser(envtest.User{Name: userName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	grant(t, c, "zerodrop-test-all-but-slices", userName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	})
	userClient := newClient(t, user.Config())
	eventually(t, 30*time.Second, "the user to read Services but not EndpointSlices", func() (bool, string) {
		svcErr := userClient.List(ctx, &corev1.ServiceList{})
		sliceErr := userClient.List(ctx, &discoveryv1.EndpointSliceList{})
		return svcErr == nil && apierrors.IsForbidden(sliceErr), fmt.Sprintf("services: %v, endpointslices: %v", svcErr, sliceErr)
	})

	r := startReplica(t, user.Config(), replica{prov: prov, sync: service.SyncIncremental})
	// Nothing can be awaited here (nothing may happen), so give a controller
	// that did not wait for the sync ample time to act.
	time.Sleep(5 * time.Second)
	if n := metrics.Sum(r.metrics.Reconciles); n != 0 {
		t.Errorf("%v reconciles before the EndpointSlice informer synced, want 0", n)
	}
	unchanged("before the EndpointSlice informer synced")

	// Granted: the reflector's next retry lists, the informer syncs and the
	// controller reconciles, with nothing to change.
	grant(t, c, "zerodrop-test-slices", userName, []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	})
	eventually(t, 90*time.Second, "a reconcile once the informer synced", func() (bool, string) {
		n := metrics.Sum(r.metrics.Reconciles)
		return n >= 1, fmt.Sprintf("reconciles=%v", n)
	})
	time.Sleep(500 * time.Millisecond)
	if n, noop := metrics.Sum(r.metrics.Reconciles), metrics.Sum(r.metrics.Reconciles.WithLabelValues("noop")); n != noop {
		t.Errorf("after the sync: %v reconciles, only %v noop", n, noop)
	}
	unchanged("after the sync")
	r.stop(t)
}

// grant binds a new ClusterRole with rules to a user.
func grant(t *testing.T, c client.Client, name, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}); err != nil {
		t.Fatal(err)
	}
}
