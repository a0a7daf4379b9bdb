package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFits(t *testing.T) {
	worker := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lab-node-1", Labels: map[string]string{"kubernetes.io/hostname": "lab-node-1"}}}
	dataPlane := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "lab-lb-1", Labels: map[string]string{dataPlaneNodeLabel: "true"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{DataPlaneTaint}},
	}
	cordoned := worker.DeepCopy()
	cordoned.Spec.Unschedulable = true
	tolerateDP := []corev1.Toleration{{Key: DataPlaneTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	// What the DaemonSet controller gives each of its pods.
	daemonPod := func(node string) corev1.PodSpec {
		return corev1.PodSpec{
			NodeSelector: map[string]string{dataPlaneNodeLabel: "true"},
			Tolerations: append(append([]corev1.Toleration{}, tolerateDP...),
				corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
		}
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		node *corev1.Node
		want bool
	}{
		{"plain pod on a worker", corev1.PodSpec{}, worker, true},
		{"plain pod on a data-plane node (taint)", corev1.PodSpec{}, dataPlane, false},
		{"plain pod on a cordoned node", corev1.PodSpec{}, cordoned, false},
		{"toleration without the label", corev1.PodSpec{Tolerations: tolerateDP}, dataPlane, true},
		{"nodeSelector not matching", corev1.PodSpec{NodeSelector: map[string]string{dataPlaneNodeLabel: "true"}}, worker, false},
		{"nodeSelector matching, taint not tolerated", corev1.PodSpec{NodeSelector: map[string]string{dataPlaneNodeLabel: "true"}}, dataPlane, false},
		{"daemon pod on its node", daemonPod("lab-lb-1"), dataPlane, true},
		{"daemon pod on another node", daemonPod("lab-lb-2"), dataPlane, false},
		{"daemon pod tolerates cordoning", daemonPod("lab-node-1"), func() *corev1.Node {
			n := cordoned.DeepCopy()
			n.Labels[dataPlaneNodeLabel] = "true"
			return n
		}(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := fits(&corev1.Pod{Spec: tc.spec}, tc.node)
			if got != tc.want {
				t.Errorf("fits = %v (%s), want %v", got, why, tc.want)
			}
			if !got && why == "" {
				t.Error("no reason given")
			}
		})
	}
}
