package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestSelectingGateOnly: with the gate-only mode on, a classless Service
// annotated zerodrop.dev/gate-only=true gets its pods injected (zerodrop
// serves their gates); without the annotation, or with the mode off, a
// classless Service does not (its class alone never selects it).
func TestSelectingGateOnly(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}
	svc := func(ann map[string]string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"}}}
	}
	gateOnly := svc(map[string]string{model.AnnotationGateOnly: "true"})
	plain := svc(nil)
	for _, tc := range []struct {
		name string
		svc  corev1.Service
		f    Filter
		want int
	}{
		{"gate-only, mode on", gateOnly, Filter{Classes: []string{"zerodrop.dev/azure"}, GateOnly: true}, 1},
		{"gate-only, mode off", gateOnly, Filter{Classes: []string{"zerodrop.dev/azure"}}, 0},
		{"classless, mode on", plain, Filter{Classes: []string{"zerodrop.dev/azure"}, GateOnly: true}, 0},
	} {
		if got := Selecting(pod, []corev1.Service{tc.svc}, tc.f); len(got) != tc.want {
			t.Errorf("%s: %d Services select the pod, want %d", tc.name, len(got), tc.want)
		}
	}
}
