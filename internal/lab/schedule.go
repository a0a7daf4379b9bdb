package lab

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// fits reports whether the scheduler may put pod on node, as the
// scheduler's filters that matter in the lab decide: the node is
// schedulable, matches the pod's nodeSelector and required node affinity
// (matchExpressions on labels and matchFields on metadata.name, which the
// DaemonSet controller sets for each of its pods), and has no NoSchedule or
// NoExecute taint the pod does not tolerate. When it does not fit, reason
// says why.
func fits(pod *corev1.Pod, node *corev1.Node) (ok bool, reason string) {
	if node.Spec.Unschedulable && !tolerates(pod, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return false, "unschedulable"
	}
	match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return false, fmt.Sprintf("node affinity: %v", err)
	}
	if !match {
		return false, "node selector or affinity does not match"
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	if untolerated {
		return false, fmt.Sprintf("untolerated taint %s", taint.ToString())
	}
	return true, ""
}

func tolerates(pod *corev1.Pod, taint corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &taint, false)
}
