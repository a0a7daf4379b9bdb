package service

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestStatusFromStaleServiceKeepsOthers: the controller builds a Service's
// status from its cache; another writer has meanwhile added a condition of
// its own. The controller's write must not remove it: it is refused as a
// conflict (the reconcile retries from a fresher cache) and the retry keeps
// both.
func TestStatusFromStaleServiceKeepsOthers(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx := context.Background()
	svc := testutil.LBService("default", "web", "zerodrop.dev/memory", 80, 8080)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	cached := svc.DeepCopy()

	// Another controller's condition, which the cache has not seen.
	other := metav1.Condition{Type: "example.com/Audited", Status: metav1.ConditionTrue, Reason: "Audited", Message: "by someone else"}
	var now corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &now); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&now.Status.Conditions, other)
	if err := c.Status().Update(ctx, &now); err != nil {
		t.Fatal(err)
	}

	ctrl := &Controller{client: c}
	ours := func(s *corev1.Service) *corev1.ServiceStatus {
		st := s.Status.DeepCopy()
		st.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.101.1"}}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue,
			Reason: "Ensured", Message: "the load balancer serves this Service"})
		return st
	}
	err := ctrl.writeStatus(ctx, cached, ours(cached))
	if err != nil && !apierrors.IsConflict(err) {
		t.Fatalf("status write from a stale Service: %v, want success or a conflict", err)
	}
	if err != nil {
		// What the requeued reconcile does: read again, write again.
		var fresh corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &fresh); err != nil {
			t.Fatal(err)
		}
		if err := ctrl.writeStatus(ctx, &fresh, ours(&fresh)); err != nil {
			t.Fatalf("status write after re-reading: %v", err)
		}
	}

	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(got.Status.Conditions, other.Type) == nil {
		t.Errorf("the status write from a stale Service removed %s: conditions %+v", other.Type, got.Status.Conditions)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, ConditionReady) || len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("the controller's status is missing: %+v", got.Status)
	}
}

// TestFinalizerFromStaleServiceSucceeds: the controller adds its finalizer
// to a Service from its cache while another writer has meanwhile changed
// the Service (a spec push, another controller's finalizer). Adding ours
// must neither fail on the stale copy (a conflict was a failed reconcile
// logged as an error, counted toward the Warning Event) nor drop what the
// other writer added.
func TestFinalizerFromStaleServiceSucceeds(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx := context.Background()
	svc := testutil.LBService("default", "web", "zerodrop.dev/memory", 80, 8080)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	cached := svc.DeepCopy()

	var now corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &now); err != nil {
		t.Fatal(err)
	}
	now.Finalizers = append(now.Finalizers, "example.com/other")
	now.Annotations = map[string]string{"example.com/pushed": "yes"}
	if err := c.Update(ctx, &now); err != nil {
		t.Fatal(err)
	}

	ctrl := &Controller{client: c, opts: Options{LoadBalancerClass: "zerodrop.dev/memory"}}
	if err := ctrl.ensureFinalizer(ctx, cached); err != nil {
		t.Fatalf("adding the finalizer to a stale copy: %v, want success", err)
	}
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Finalizers, Finalizer) || !slices.Contains(got.Finalizers, "example.com/other") {
		t.Errorf("finalizers %v: want ours and the other writer's", got.Finalizers)
	}
	if got.Annotations[AnnotationFinalizedBy] != "zerodrop.dev/memory" || got.Annotations["example.com/pushed"] != "yes" {
		t.Errorf("annotations %v: want %s and the other writer's", got.Annotations, AnnotationFinalizedBy)
	}
}
