package podcache_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/podcache"
)

func trimmed(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := podcache.Transform(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := out.(*corev1.Pod)
	if !ok {
		t.Fatalf("Transform returned %T, want *corev1.Pod", out)
	}
	return p
}

// TestTransformKeepsWhatReadersRead: every field a reader of cached Pods
// uses (the package comment's list) comes through the transform as the
// server sent it; the rest of a full pod is dropped.
func TestTransformKeepsWhatReadersRead(t *testing.T) {
	full := fromServer(fullPod("shop", "web-5d8f7c9b6-x2x7q"))
	got := trimmed(t, full)
	for _, f := range []struct {
		field string
		get   func(*corev1.Pod) any
		kept  bool
	}{
		{"metadata.name", func(p *corev1.Pod) any { return p.Name }, true},
		{"metadata.namespace", func(p *corev1.Pod) any { return p.Namespace }, true},
		{"metadata.uid", func(p *corev1.Pod) any { return p.UID }, true},
		{"metadata.resourceVersion", func(p *corev1.Pod) any { return p.ResourceVersion }, true},
		{"metadata.generation", func(p *corev1.Pod) any { return p.Generation }, true},
		{"metadata.creationTimestamp", func(p *corev1.Pod) any { return p.CreationTimestamp }, true},
		{"metadata.labels", func(p *corev1.Pod) any { return p.Labels }, true},
		{"metadata.ownerReferences", func(p *corev1.Pod) any { return p.OwnerReferences }, false},
		{"metadata.deletionTimestamp", func(p *corev1.Pod) any { return p.DeletionTimestamp }, true},
		{"metadata.deletionGracePeriodSeconds", func(p *corev1.Pod) any { return p.DeletionGracePeriodSeconds }, true},
		{"spec.nodeName", func(p *corev1.Pod) any { return p.Spec.NodeName }, true},
		{"spec.readinessGates", func(p *corev1.Pod) any { return p.Spec.ReadinessGates }, true},
		{"status.phase", func(p *corev1.Pod) any { return p.Status.Phase }, true},
		{"status.conditions", func(p *corev1.Pod) any { return p.Status.Conditions }, true},
		{"status.podIP", func(p *corev1.Pod) any { return p.Status.PodIP }, true},
		{"status.podIPs", func(p *corev1.Pod) any { return p.Status.PodIPs }, true},

		{"metadata.annotations", func(p *corev1.Pod) any { return p.Annotations }, false},
		{"metadata.managedFields", func(p *corev1.Pod) any { return p.ManagedFields }, false},
		{"metadata.finalizers", func(p *corev1.Pod) any { return p.Finalizers }, false},
		{"spec.containers", func(p *corev1.Pod) any { return p.Spec.Containers }, false},
		{"spec.initContainers", func(p *corev1.Pod) any { return p.Spec.InitContainers }, false},
		{"spec.volumes", func(p *corev1.Pod) any { return p.Spec.Volumes }, false},
		{"spec.tolerations", func(p *corev1.Pod) any { return p.Spec.Tolerations }, false},
		{"spec.affinity", func(p *corev1.Pod) any { return p.Spec.Affinity }, false},
		{"spec.serviceAccountName", func(p *corev1.Pod) any { return p.Spec.ServiceAccountName }, false},
		{"spec.terminationGracePeriodSeconds", func(p *corev1.Pod) any { return p.Spec.TerminationGracePeriodSeconds }, false},
		{"status.containerStatuses", func(p *corev1.Pod) any { return p.Status.ContainerStatuses }, false},
		{"status.initContainerStatuses", func(p *corev1.Pod) any { return p.Status.InitContainerStatuses }, false},
		{"status.hostIP", func(p *corev1.Pod) any { return p.Status.HostIP }, false},
		{"status.hostIPs", func(p *corev1.Pod) any { return p.Status.HostIPs }, false},
		{"status.startTime", func(p *corev1.Pod) any { return p.Status.StartTime }, false},
		{"status.qosClass", func(p *corev1.Pod) any { return p.Status.QOSClass }, false},
	} {
		t.Run(f.field, func(t *testing.T) {
			before, after := f.get(full), f.get(got)
			if reflect.ValueOf(before).IsZero() {
				t.Fatalf("the fixture has no %s: the case tests nothing", f.field)
			}
			switch {
			case f.kept && !reflect.DeepEqual(after, before):
				t.Errorf("%s = %v after the transform, want %v: a reader of cached pods reads it", f.field, after, before)
			case !f.kept && !reflect.ValueOf(after).IsZero():
				t.Errorf("%s kept (%v): nothing reads it from the cache", f.field, after)
			}
		})
	}
}

// TestTransformKeepsNothingElse: the trimmed pod, as JSON, holds only the
// fields the table above keeps — a field copied by mistake (the whole spec,
// say) shows here even if the table does not name it.
func TestTransformKeepsNothingElse(t *testing.T) {
	allowed := []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
		"metadata.creationTimestamp", "metadata.labels", "metadata.deletionTimestamp",
		"metadata.deletionGracePeriodSeconds", "spec.nodeName", "spec.readinessGates", "spec.containers", "status.phase",
		"status.conditions", "status.podIP", "status.podIPs"}
	raw, err := json.Marshal(trimmed(t, fromServer(fullPod("shop", "web-a"))))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var got []string
	for top, fields := range doc {
		for name := range fields {
			got = append(got, top+"."+name)
		}
	}
	sort.Strings(got)
	for _, f := range got {
		if !slices.Contains(allowed, f) {
			t.Errorf("the trimmed pod has %s", f)
		}
	}
	// spec.containers is "containers": null — the field has no omitempty.
	if c, ok := doc["spec"]["containers"]; ok && c != nil {
		t.Errorf("spec.containers = %v, want null", c)
	}
	t.Logf("kept: %s", strings.Join(got, ", "))
}

// TestTransformReadersAgree: the exported readers answer alike on the full
// and the trimmed pod.
func TestTransformReadersAgree(t *testing.T) {
	full := fromServer(fullPod("shop", "web-a"))
	got := trimmed(t, full)
	if podgate.HasGate(got) != podgate.HasGate(full) || !podgate.HasGate(got) {
		t.Error("podgate.HasGate differs, or false, on the trimmed pod")
	}
	if !lbtarget.DeletionStart(got).Equal(lbtarget.DeletionStart(full)) || lbtarget.GracePeriod(got) != lbtarget.GracePeriod(full) {
		t.Errorf("deletion start %v / grace %v on the trimmed pod, want %v / %v",
			lbtarget.DeletionStart(got), lbtarget.GracePeriod(got), lbtarget.DeletionStart(full), lbtarget.GracePeriod(full))
	}
}

// TestTransformPassesOthersThrough: a tombstone (a delete the informer
// missed) or another kind is returned as it is.
func TestTransformPassesOthersThrough(t *testing.T) {
	tomb := toolscache.DeletedFinalStateUnknown{Key: "shop/web-a", Obj: fullPod("shop", "web-a")}
	for _, in := range []any{tomb, &corev1.Service{}} {
		out, err := podcache.Transform(in)
		if err != nil || !reflect.DeepEqual(out, in) {
			t.Errorf("Transform(%T) = %v, %v; want it unchanged", in, out, err)
		}
	}
	// Idempotent: a trimmed pod trimmed again is the same pod.
	once := trimmed(t, fromServer(fullPod("shop", "web-a")))
	if twice := trimmed(t, once); !reflect.DeepEqual(twice, once) {
		t.Error("a trimmed pod changes when trimmed again")
	}
}
