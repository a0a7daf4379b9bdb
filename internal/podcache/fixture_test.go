package podcache_test

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
)

// fullPod is a pod as a real cluster has them, not as the lab's are: an
// app container and a sidecar, an init container, each with env, ports,
// probes, mounts and resources; volumes (a ConfigMap, a Secret, the
// projected ServiceAccount token); tolerations and affinity; annotations
// (kubectl's last-applied-configuration on a pod applied by hand, a
// checksum, a scrape hint, zerodrop's own opt-out); managedFields; the
// kubelet's status with container statuses; zerodrop's readiness gate
// and its condition False (fromServer). fullPod itself is what a pod's
// creator sends.
func fullPod(ns, name string) *corev1.Pod {
	env := func(prefix string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for i := range 12 {
			out = append(out, corev1.EnvVar{Name: fmt.Sprintf("%s_SETTING_%d", prefix, i), Value: fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", 20))})
		}
		return append(out,
			corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			corev1.EnvVar{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}})
	}
	probe := func(port string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(port)}},
			InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	mounts := []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "tls", MountPath: "/etc/tls", ReadOnly: true},
		{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	container := func(name, image string, port int32) corev1.Container {
		return corev1.Container{Name: name, Image: image, Args: []string{"--config=/etc/app/config.yaml", "--log-level=info"},
			Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: port + 1000, Protocol: corev1.ProtocolTCP}},
			Env:       env(strings.ToUpper(name)),
			Resources: resources, VolumeMounts: mounts, ReadinessProbe: probe("http"), LivenessProbe: probe("http"),
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy: corev1.PullIfNotPresent,
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	}
	// An init container without probes: only a sidecar (restartPolicy
	// Always) may have them.
	initContainer := container("migrate", "registry.example/web-migrate:1.2.3", 9000)
	initContainer.ReadinessProbe, initContainer.LivenessProbe = nil, nil
	lastApplied := `{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{},"labels":{"app":"web"},"name":"` + name + `","namespace":"` + ns +
		`"},"spec":{"containers":[{"image":"registry.example/web:1.2.3","name":"web","ports":[{"containerPort":8080,"name":"http"}],` +
		`"env":[` + strings.TrimSuffix(strings.Repeat(`{"name":"WEB_SETTING","value":"value-xxxxxxxxxxxxxxxxxxxx"},`, 12), ",") + `]}]}}`
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": "web", "pod-template-hash": "5d8f7c9b6", "app.kubernetes.io/name": "web", "app.kubernetes.io/version": "1.2.3"},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": lastApplied,
				"checksum/config":      "3f786850e387550fdab836ed7e6dc881de23001b3f786850e387550fdab836ed",
				"prometheus.io/scrape": "true",
				"zerodrop.dev/inject":  "true",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f7c9b6",
				UID: "6f1c1e0a-0000-4000-8000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Finalizers: []string{"example.com/cleanup"},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{initContainer},
			Containers:     []corev1.Container{container("web", "registry.example/web:1.2.3", 8080), container("proxy", "registry.example/proxy:2.0.1", 15001)},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}}}}}},
			},
			NodeName:                      "node-1",
			ServiceAccountName:            "web",
			TerminationGracePeriodSeconds: ptr.To[int64](45),
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}, {ConditionType: "example.com/other-gate"}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}},
		},
	}
}

// fromServer gives pod what a cache gets from the server besides the spec:
// the server's metadata (a deletion begun) and the kubelet's status.
func fromServer(pod *corev1.Pod) *corev1.Pod {
	t0 := metav1.NewTime(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	pod.UID = types.UID("9a3e2c1d-0000-4000-8000-" + fmt.Sprintf("%012d", len(pod.Name)))
	pod.ResourceVersion, pod.Generation, pod.CreationTimestamp = "123456", 1, t0
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(t0.Add(time.Hour))), ptr.To[int64](45)
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: &t0, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}`)}},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t0, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{}}},"f:podIP":{},"f:podIPs":{}}}`)}}}
	pod.Status = kubeletStatus()
	return pod
}

// kubeletStatus is a running pod's status as its kubelet writes it, its
// containers ready and zerodrop's gate False.
func kubeletStatus() corev1.PodStatus {
	t0 := metav1.NewTime(time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	cond := func(typ corev1.PodConditionType, status corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: t0, Reason: "Reason" + string(status), Message: "set by the kubelet"}
	}
	cs := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, ImageID: image + "@sha256:" + strings.Repeat("ab", 32),
			ContainerID: "containerd://" + strings.Repeat("0f", 32), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized, corev1.ConditionTrue), cond(corev1.ContainersReady, corev1.ConditionTrue),
			cond(corev1.PodScheduled, corev1.ConditionTrue), cond(corev1.PodReady, corev1.ConditionFalse), cond(podgate.ConditionType, corev1.ConditionFalse)},
		HostIP: "10.0.0.4", HostIPs: []corev1.HostIP{{IP: "10.0.0.4"}},
		PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}, {IP: "fd00:244:1::7"}},
		StartTime: &t0, QOSClass: corev1.PodQOSBurstable,
		InitContainerStatuses: []corev1.ContainerStatus{cs("migrate", "registry.example/web-migrate:1.2.3")},
		ContainerStatuses:     []corev1.ContainerStatus{cs("web", "registry.example/web:1.2.3"), cs("proxy", "registry.example/proxy:2.0.1")},
	}
}
