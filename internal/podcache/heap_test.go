package podcache_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"zerodrop.dev/zerodrop/internal/podcache"
)

var heapPods = flag.Int("heap-pods", 2000, "pods TestTrimmedPodsHeap holds (go test -run TestTrimmedPodsHeap -args -heap-pods=10000)")

// smallPod is a pod as hack/procmem creates them — one container with one
// port, its status with the four kubelet conditions, no annotations, env
// or probes — with what the API server adds to every pod: its defaults,
// the ServiceAccount token volume and mount, the two default tolerations,
// managedFields.
func smallPod(ns, name string) *corev1.Pod {
	t0 := metav1.NewTime(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "9a3e2c1d-0000-4000-8000-000000000001", ResourceVersion: "123456",
			CreationTimestamp: t0, Labels: map[string]string{"app": "svc-00042"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "procmem", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				Time: &t0, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{}}}}}`)}}}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "procmem-endpoint",
			Ports:                  []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			VolumeMounts:           []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullAlways}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420),
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}}}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", DeprecatedServiceAccount: "default", SecurityContext: &corev1.PodSecurityContext{},
			SchedulerName: "default-scheduler", Priority: ptr.To[int32](0), EnableServiceLinks: ptr.To(true),
			PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}}, StartTime: &t0,
			QOSClass: corev1.PodQOSBestEffort},
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: t0})
	}
	return pod
}

// heapOf is the live heap, in bytes, of n pods decoded from pod's JSON (as
// an informer decodes them: every string its own allocation) and passed
// through transform, as a cache holds them.
func heapOf(t *testing.T, pod *corev1.Pod, n int, transform toolscache.TransformFunc) float64 {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	held := make([]any, n)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for i := range held {
		// A name of its own, so that no two pods share a string.
		one := strings.Replace(string(raw), `"name":"`+pod.Name+`"`, fmt.Sprintf(`"name":"%s-%06d"`, pod.Name, i), 1)
		var p corev1.Pod
		if err := json.Unmarshal([]byte(one), &p); err != nil {
			t.Fatal(err)
		}
		if held[i], err = transform(&p); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(held)
	return float64(ms.HeapAlloc-base) / float64(n)
}

// TestTrimmedPodsHeap measures what a cached pod costs on the heap with
// the transform the cache had before (managedFields stripped) and with
// podcache.Transform, and fails unless a real cluster's pod (fullPod)
// costs at most a fifth as much trimmed. The small, procmem-like pod is
// measured for comparison.
func TestTrimmedPodsHeap(t *testing.T) {
	n := *heapPods
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		// most is the largest share of the untrimmed cost the trimmed pod
		// may take (0: measured only).
		most float64
	}{
		{"full", fromServer(fullPod("shop", "web-5d8f7c9b6-x2x7q")), 0.2},
		{"procmem-like", smallPod("svc-00042", "svc-00042-ep-0"), 0},
	} {
		before := heapOf(t, c.pod, n, cache.TransformStripManagedFields())
		after := heapOf(t, c.pod, n, podcache.Transform)
		t.Logf("%s pod: %.0f bytes each with managedFields stripped, %.0f trimmed (%.0f%%); %d pods: %.1f MiB, %.1f MiB",
			c.name, before, after, 100*after/before, n, before*float64(n)/(1<<20), after*float64(n)/(1<<20))
		if c.most > 0 && after > c.most*before {
			t.Errorf("%s pod trimmed: %.0f bytes, more than %.0f%% of its %.0f untrimmed", c.name, after, 100*c.most, before)
		}
	}
}
