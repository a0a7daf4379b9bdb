package bgp

import (
	"context"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

func TestDecideStop(t *testing.T) {
	now := metav1.Now()
	owned := func(kind string, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "speaker", Controller: ptr.To(controller)}}
	}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "speaker-1", OwnerReferences: owned("DaemonSet", true)}}
	deleted := running.DeepCopy()
	deleted.DeletionTimestamp = &now
	deletedBare := deleted.DeepCopy()
	deletedBare.OwnerReferences = nil
	deletedNotController := deleted.DeepCopy()
	deletedNotController.OwnerReferences = owned("DaemonSet", false)
	deletedByReplicaSet := deleted.DeepCopy()
	deletedByReplicaSet.OwnerReferences = owned("ReplicaSet", true)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "speaker"}}
	dsDeleting := ds.DeepCopy()
	dsDeleting.DeletionTimestamp = &now
	dsSelecting := ds.DeepCopy()
	dsSelecting.Spec.Template.Spec.NodeSelector = map[string]string{"role": "lb"}
	lbNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"role": "lb"}}}
	otherNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"role": "web"}}}
	notFound := func(resource string) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, "x")
	}
	unreachable := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		desc         string
		facts        StopFacts
		wantWithdraw bool
	}{
		{"the node leaving", StopFacts{Leaving: true}, true},
		{"no pod name", StopFacts{}, false},
		{"API server unreachable", StopFacts{PodErr: unreachable}, false},
		{"pod gone (deleted at once)", StopFacts{PodErr: notFound("pods")}, false},
		{"pod stopped by its kubelet, not deleted (node shutdown)", StopFacts{Pod: running}, true},
		{"pod deleted, no owner", StopFacts{Pod: deletedBare}, true},
		{"pod deleted, a DaemonSet owner that is not its controller", StopFacts{Pod: deletedNotController}, true},
		{"pod deleted, a ReplicaSet controls it", StopFacts{Pod: deletedByReplicaSet}, true},
		{"pod deleted, DaemonSet gone (uninstall)", StopFacts{Pod: deleted, OwnerErr: notFound("daemonsets")}, true},
		{"pod deleted, DaemonSet unreadable", StopFacts{Pod: deleted, OwnerErr: unreachable}, false},
		{"pod deleted, DaemonSet not read", StopFacts{Pod: deleted}, false},
		{"pod deleted, DaemonSet being deleted", StopFacts{Pod: deleted, Owner: dsDeleting}, true},
		{"pod deleted, DaemonSet replaces it (update)", StopFacts{Pod: deleted, Owner: ds}, false},
		{"pod deleted, DaemonSet selects the node", StopFacts{Pod: deleted, Owner: dsSelecting, Node: lbNode}, false},
		{"pod deleted, DaemonSet no longer selects the node", StopFacts{Pod: deleted, Owner: dsSelecting, Node: otherNode}, true},
		{"pod deleted, DaemonSet selects, Node unreadable", StopFacts{Pod: deleted, Owner: dsSelecting, NodeErr: unreachable}, false},
		{"the node leaving wins over an update", StopFacts{Leaving: true, Pod: deleted, Owner: ds}, true},
	} {
		withdraw, why := DecideStop(tc.facts)
		if withdraw != tc.wantWithdraw || why == "" {
			t.Errorf("%s: withdraw %t (%q), want %t with a reason", tc.desc, withdraw, why, tc.wantWithdraw)
		}
	}
}

// TestReadStopFacts reads a speaker's stop on a real kube-apiserver, through
// the objects the API server really keeps: a Pod bound to its node stays,
// deletionTimestamp set, once deleted with a grace period (no kubelet
// confirms here), and a DaemonSet deleted with the orphan policy leaves it.
// In turn: the Pod not deleted (the kubelet stopping it: a node shutdown)
// withdraws; deleted while its DaemonSet selects the node (an update)
// restarts gracefully; the node's label changed so the DaemonSet no longer
// selects it withdraws; the DaemonSet being deleted, then gone, withdraws; and a Pod name the
// API server does not know restarts gracefully.
func TestReadStopFacts(t *testing.T) {
	env := controlplane.StartEnv(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const ns, nodeName = "default", "node-a"
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"role": "lb"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podLabels := map[string]string{"app": "speaker"}
	container := corev1.Container{Name: "speaker", Image: "zerodrop"}
	ds, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: podLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{NodeSelector: map[string]string{"role": "lb"}, Containers: []corev1.Container{container}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker-1", Labels: podLabels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{container}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	decide := func(step, pod string, want bool) {
		t.Helper()
		withdraw, why := DecideStop(ReadStopFacts(ctx, cs, ns, pod, nodeName, false))
		if withdraw != want {
			t.Fatalf("%s: withdraw %t (%s), want %t", step, withdraw, why, want)
		}
		t.Logf("%s: withdraw %t: %s", step, withdraw, why)
	}

	decide("pod running, not deleted", "speaker-1", true)

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "speaker-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "speaker-1", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("the deleted Pod bound to a node: %v, deletionTimestamp %v; want it kept, deleting", err, p.DeletionTimestamp)
	}
	decide("pod deleted, its DaemonSet selects the node", "speaker-1", false)

	patchLabel := func(v string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"role":"` + v + `"}}}`)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patchLabel("web")
	decide("pod deleted, the node no longer selected", "speaker-1", true)
	patchLabel("lb")
	decide("pod deleted, the node selected again", "speaker-1", false)

	// Orphan: the API server keeps the DaemonSet, deleting, until the
	// garbage collector (not run here) removes its orphan finalizer.
	if err := cs.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	decide("pod deleted, its DaemonSet being deleted", "speaker-1", true)
	if _, err := cs.AppsV1().DaemonSets(ns).Patch(ctx, ds.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Get(ctx, ds.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the DaemonSet without its finalizer: %v, want it gone", err)
	}
	decide("pod deleted, its DaemonSet gone", "speaker-1", true)

	decide("a Pod the API server does not know", "speaker-2", false)
}
