package podcache_test

import (
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/podcache"
)

// decoded is pod as an informer has it: decoded from JSON, every string
// and map its own allocation.
func decoded(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestTransformSharesWhatPodsHoldAlike: two pods of one ReplicaSet, decoded
// apart, hold one namespace, node name, label set, readiness-gate list and
// one copy of each condition's words once trimmed; what is a pod's own
// (its name, its address, its conditions' times) stays its own. A pod
// whose labels differ in one value has its own label set, sharing the
// strings alike. Trimmed pods still equal what they were sent as.
func TestTransformSharesWhatPodsHoldAlike(t *testing.T) {
	first := fromServer(fullPod("shop", "web-5d8f7c9b6-aaaaa"))
	second := fromServer(fullPod("shop", "web-5d8f7c9b6-bbbbb"))
	second.Status.PodIP, second.Status.PodIPs = "10.244.3.9", []corev1.PodIP{{IP: "10.244.3.9"}}
	other := fromServer(fullPod("shop", "web-77f6d4c5b-ccccc"))
	other.Labels["pod-template-hash"] = "77f6d4c5b"

	var got [3]*corev1.Pod
	for i, p := range []*corev1.Pod{first, second, other} {
		d := decoded(t, p)
		got[i] = trimmed(t, d)
		if got[i].Name != d.Name || got[i].Status.PodIP != d.Status.PodIP || !reflect.DeepEqual(got[i].Labels, d.Labels) ||
			!reflect.DeepEqual(got[i].Status.Conditions, d.Status.Conditions) || !reflect.DeepEqual(got[i].Spec.ReadinessGates, d.Spec.ReadinessGates) {
			t.Fatalf("pod %s trimmed differs from what it was sent as", p.Name)
		}
	}
	a, b, c := got[0], got[1], got[2]
	if a.Spec.NodeName == "" || len(a.Labels) == 0 || len(a.Spec.ReadinessGates) == 0 || len(a.Status.Conditions) == 0 {
		t.Fatal("the fixture lacks a node, labels, gates or conditions: the test tests nothing")
	}
	for what, shared := range map[string]bool{
		"namespace":           sameString(a.Namespace, b.Namespace),
		"node name":           sameString(a.Spec.NodeName, b.Spec.NodeName),
		"label set":           reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(b.Labels).UnsafePointer(),
		"readiness gates":     &a.Spec.ReadinessGates[0] == &b.Spec.ReadinessGates[0],
		"condition type":      sameString(string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)),
		"condition status":    sameString(string(a.Status.Conditions[0].Status), string(b.Status.Conditions[0].Status)),
		"phase":               sameString(string(a.Status.Phase), string(b.Status.Phase)),
		"another set's label": sameString(a.Labels["app"], c.Labels["app"]),
		"another set's node":  sameString(a.Spec.NodeName, c.Spec.NodeName),
		"another set's gate":  &a.Spec.ReadinessGates[0] == &c.Spec.ReadinessGates[0],
	} {
		if !shared {
			t.Errorf("the pods' %s: a copy each, want one shared", what)
		}
	}
	for what, own := range map[string]bool{
		"name":                 !sameString(a.Name, b.Name),
		"conditions":           &a.Status.Conditions[0] != &b.Status.Conditions[0],
		"another set's labels": reflect.ValueOf(a.Labels).UnsafePointer() != reflect.ValueOf(c.Labels).UnsafePointer(),
	} {
		if !own {
			t.Errorf("the pods' %s: shared, want one each", what)
		}
	}
	if !sameString(a.Status.PodIP, a.Status.PodIPs[0].IP) {
		t.Error("status.podIP and the same address in status.podIPs: two copies, want one")
	}
}

// TestTransformConcurrent: informers of several caches trim at once; the
// shared tables hold (run with -race).
func TestTransformConcurrent(t *testing.T) {
	pod := fromServer(fullPod("shop", "web-a"))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := podcache.Transform(pod.DeepCopy()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
