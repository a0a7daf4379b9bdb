package azure

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestWorkloadBackendMode: on zerodrop's own load balancer, --backend ip
// stays IP mode by the annotation now that the Azure provider defaults to
// node mode, and --backend node runs without the annotation, on that
// default, as it ships. The CCM's modes are left as the scenarios made
// them. The default is held here: were it IP mode, --backend node would
// measure IP mode.
func TestWorkloadBackendMode(t *testing.T) {
	if got := (*azure.Provider)(nil).DefaultBackendMode(); got != model.NodeMode {
		t.Fatalf("the Azure provider's default backend mode is %q: --backend node runs on it, want node", got)
	}
	w := New(Options{ARMLatency: DefaultARMLatency})
	for _, tc := range []struct {
		mode      report.Mode
		given     string // the scenarios' annotation: "" for --backend ip
		want      string
		annotated bool
	}{
		{report.ModeZerodrop, "", "ip", true},
		{report.ModeZerodrop, "node", "", false},
		{report.ModeGates, "", "", false},
		{report.ModeGates, "node", "node", true},
		{report.ModeUpstream, "node", "node", true},
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
		if tc.given != "" {
			svc.Annotations = map[string]string{model.AnnotationBackendMode: tc.given}
		}
		w.NewRun(world.Env{Mode: tc.mode}).Service(svc)
		got, ok := svc.Annotations[model.AnnotationBackendMode]
		if got != tc.want || ok != tc.annotated {
			t.Errorf("%s, scenarios' annotation %q: backend-mode %q (set %t), want %q (set %t)", tc.mode, tc.given, got, ok, tc.want, tc.annotated)
		}
	}
}
