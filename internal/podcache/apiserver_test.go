package podcache_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestGatePatchFromTrimmedPodKeepsTheRest: the readiness gate, wired as
// the command wires it (controller.Build, so with the cache's pod
// transform), patches the status of a pod it read from its cache — a
// trimmed pod — and the server's pod keeps everything the cache dropped:
// containers, volumes, annotations, the kubelet's other conditions whole,
// its container statuses. The pod exists, status and all, before the
// controller starts, so the gate's first read is its synced cache's and
// its patch does not conflict (a conflict would read the pod again from
// the server, whole).
func TestGatePatchFromTrimmedPodKeepsTheRest(t *testing.T) {
	rc := controlplane.Start(t)
	c := testutil.Client(t, rc)
	ctx := context.Background()

	const ns = "default"
	pod := fullPod(ns, "web-a")
	// The webhook would have added the gate; ConfigMap and Secret volumes
	// need not exist for a pod no kubelet runs, its ServiceAccount must.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Spec.ServiceAccountName}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = kubeletStatus()
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var before corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &before); err != nil {
		t.Fatal(err)
	}

	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.LeaderElect = rc, false
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", "0"
	log := testr.New(t)
	// No Service selects the pod: the gate opens at its first read, with
	// reason NoLoadBalancer. What is tested is the write, not the verdict.
	cfg.Override.Provider, cfg.Override.Logger = memory.New(provider.Hooks{}), &log
	runCtx, cancel := context.WithCancel(ctx)
	in, err := controller.Build(runCtx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- in.Start(runCtx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	var after corev1.Pod
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &after); err != nil {
			t.Fatal(err)
		}
		if gate(&after) != nil && gate(&after).Status == corev1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate's condition is not True within 30 s: %+v", gate(&after))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The cache the gate read is the trimmed one: what the command wires.
	var cached corev1.Pod
	if err := in.Manager.GetCache().Get(ctx, client.ObjectKeyFromObject(pod), &cached); err != nil {
		t.Fatal(err)
	}
	if len(cached.Spec.Containers) != 0 || len(cached.Annotations) != 0 || cached.Spec.NodeName != before.Spec.NodeName {
		t.Errorf("the controller's cache holds %d containers, %d annotations, node %q: want the trimmed pod (podcache.Transform)",
			len(cached.Spec.Containers), len(cached.Annotations), cached.Spec.NodeName)
	}
	if g := gate(&after); g.Reason != "NoLoadBalancer" {
		t.Errorf("the gate opened with reason %q, want NoLoadBalancer", g.Reason)
	}

	if !reflect.DeepEqual(after.Spec, before.Spec) {
		t.Errorf("the pod's spec changed with the gate's patch:\nbefore %+v\nafter  %+v", before.Spec, after.Spec)
	}
	if !reflect.DeepEqual(after.Annotations, before.Annotations) || len(after.Annotations) == 0 {
		t.Errorf("the pod's annotations changed with the gate's patch: %v, want %v", after.Annotations, before.Annotations)
	}
	if !reflect.DeepEqual(after.OwnerReferences, before.OwnerReferences) || !reflect.DeepEqual(after.Finalizers, before.Finalizers) {
		t.Errorf("owner references %v, finalizers %v after the gate's patch, want %v, %v",
			after.OwnerReferences, after.Finalizers, before.OwnerReferences, before.Finalizers)
	}
	if !reflect.DeepEqual(after.Status.ContainerStatuses, before.Status.ContainerStatuses) ||
		!reflect.DeepEqual(after.Status.InitContainerStatuses, before.Status.InitContainerStatuses) ||
		after.Status.HostIP != before.Status.HostIP || after.Status.QOSClass != before.Status.QOSClass {
		t.Errorf("the kubelet's status changed with the gate's patch:\nbefore %+v\nafter  %+v", before.Status, after.Status)
	}
	// Every condition but the gate's as the kubelet wrote it, whole: the
	// merge patch replaced the list with the cached one.
	want := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, cond := range before.Status.Conditions {
		want[cond.Type] = cond
	}
	for _, cond := range after.Status.Conditions {
		if cond.Type == podgate.ConditionType {
			continue
		}
		if w := want[cond.Type]; !reflect.DeepEqual(cond, w) {
			t.Errorf("condition %s = %+v after the gate's patch, want %+v", cond.Type, cond, w)
		}
		delete(want, cond.Type)
	}
	delete(want, podgate.ConditionType)
	for typ := range want {
		t.Errorf("condition %s lost with the gate's patch", typ)
	}
}

func gate(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == podgate.ConditionType {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
