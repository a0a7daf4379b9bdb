package cluster

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// serviceAccountVolume reports whether v is a projected volume with the
// pod's ServiceAccount token (the kubelet's automount volume, or the chart's
// own spelling of it): the lab serves it from the pod's token directory,
// bound where the kubelet mounts it (/run/secrets/kubernetes.io/serviceaccount,
// which /var/run/secrets/... reaches on the lab's host).
func serviceAccountVolume(v *corev1.Volume) bool {
	if v == nil || v.Projected == nil {
		return false
	}
	return slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
}

func podVolume(pod *corev1.Pod, name string) *corev1.Volume {
	if pod == nil {
		return nil
	}
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// tokenIn reports whether container c gets the pod's token, as the kubelet
// decides: every container unless the pod turns the automount off, and
// then those that mount a ServiceAccount token volume.
func tokenIn(pod *corev1.Pod, c *corev1.Container) bool {
	if pod == nil || pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		return true
	}
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return serviceAccountVolume(podVolume(pod, m.Name)) })
}
