package cluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestMountScriptToken: with the pod's automount off, as the chart's data
// plane has it, only a container that mounts a ServiceAccount token volume
// gets the pod's token (bound where the kubelet puts it, not as a volume on
// the host's /var/run); the others get none.
func TestMountScriptToken(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		Volumes: []corev1.Volume{
			{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}}}}}},
		},
	}}
	r := &podRuntime{uid: "u", pod: pod, env: podEnv{containers: &ContainerEnv{ImageDir: "/lab/image", Dir: "/lab/pods"}}}
	const bind = "mount --bind '/lab/pods/u/sa' /run/secrets/kubernetes.io/serviceaccount"
	haproxy := &corev1.Container{Name: "haproxy", VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/run/zerodrop"}}}
	script, err := mountScript(r, haproxy)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(script, "serviceaccount") {
		t.Errorf("a container without a token volume gets the token:\n%s", script)
	}
	controller := &corev1.Container{Name: "controller", VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/run/zerodrop"},
		{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}
	script, err = mountScript(r, controller)
	if err != nil {
		t.Fatalf("a container mounting the token volume: %v", err)
	}
	if !strings.Contains(script, bind) || strings.Contains(script, "/run/.lab/volumes/kube-api-access") {
		t.Errorf("a container mounting the token volume: want the pod's token directory bound, not a volume:\n%s", script)
	}
	// Without the pod's opt-out every container has it, as before.
	pod.Spec.AutomountServiceAccountToken = nil
	if script, _ := mountScript(r, haproxy); !strings.Contains(script, bind) {
		t.Errorf("automount on: a container gets no token:\n%s", script)
	}
}
