package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestGateOnlyNotManaged: a Service that asks for the gates only is never
// zerodrop's to write — not when classless under --adopt-classless, not
// when its class is zerodrop's own — while the same Services without the
// annotation are.
func TestGateOnlyNotManaged(t *testing.T) {
	c := &Controller{opts: Options{AdoptClassless: true, LoadBalancerClass: "zerodrop.dev/azure"}}
	svc := func(class *string, gateOnly string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class}}
		if gateOnly != "" {
			s.Annotations = map[string]string{model.AnnotationGateOnly: gateOnly}
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		managed bool
	}{
		{"classless, adopted", svc(nil, ""), true},
		{"classless, gate-only", svc(nil, "true"), false},
		{"own class", svc(ptr.To("zerodrop.dev/azure"), ""), true},
		{"own class, gate-only", svc(ptr.To("zerodrop.dev/azure"), "true"), false},
		{"classless, gate-only false", svc(nil, "false"), true},
	} {
		if got := c.managed(tc.svc); got != tc.managed {
			t.Errorf("%s: managed %v, want %v", tc.name, got, tc.managed)
		}
	}
}
