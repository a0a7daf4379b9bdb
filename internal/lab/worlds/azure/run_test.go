package azure

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
)

// TestWritersByMode: which writer each mode has on emulated Azure, as the
// runner asks the world. The CCM alone in upstream and recipe (the runner
// starts no controller pods), beside zerodrop's gates in gates mode
// (restart-idle restarts the CCM there too), zerodrop's controllers alone
// in zerodrop mode; the Service internal wherever the CCM writes it and
// gate-only in gates mode.
func TestWritersByMode(t *testing.T) {
	w := New(Options{ARMLatency: DefaultARMLatency})
	for _, tc := range []struct {
		mode                           report.Mode
		owns, restarts, internal, gate bool
	}{
		{report.ModeUpstream, true, true, true, false},
		{report.ModeRecipe, true, true, true, false},
		{report.ModeGates, false, true, true, true},
		{report.ModeZerodrop, false, false, false, false},
	} {
		r := w.NewRun(world.Env{Mode: tc.mode})
		rs, ok := r.(world.WriterRestarter)
		if !ok {
			t.Fatalf("%s: the Azure run restarts no writer", tc.mode)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
		r.Service(svc)
		if r.OwnsWriters() != tc.owns || rs.RestartsWriter() != tc.restarts ||
			(svc.Annotations[azureInternalAnnotation] == "true") != tc.internal || (svc.Annotations[model.AnnotationGateOnly] == "true") != tc.gate {
			t.Errorf("%s: owns writers %v, restarts the writer %v, annotations %v; want %v, %v, internal %v, gate-only %v",
				tc.mode, r.OwnsWriters(), rs.RestartsWriter(), svc.Annotations, tc.owns, tc.restarts, tc.internal, tc.gate)
		}
	}
}

// TestClockAndArgs: the report's clock is the options' with the run's
// grace period and the bound's promise; zerodrop's controllers get the
// emulator's wiring, and in gates mode they read the CCM's load balancer.
func TestClockAndArgs(t *testing.T) {
	w := New(Options{ARMLatency: 3e9, LBPropagation: 1e9, HealthLag: 2e9})
	c := w.Clock(report.ModeZerodrop, 30e9)
	if c.ARMLatencySeconds != 3 || c.LBPropagationSeconds != 1 || c.HealthLagSeconds != 2 || c.GraceSeconds != 30 || c.Promise == nil {
		t.Errorf("clock %+v", c)
	}
	for _, mode := range []report.Mode{report.ModeGates, report.ModeZerodrop} {
		r := &run{w: w, env: world.Env{Mode: mode, Class: "zerodrop.dev/lab-1", Net: &cluster.Network{Kubeconfig: "kc"}}, served: &azurearm.Served{URL: "https://127.0.0.1:1", CAFile: "ca.pem"}}
		args := r.ControllerArgs([]string{"controller", "--haproxy-dir=x"})
		if slices.Contains(args, "--haproxy-dir=x") || !slices.Contains(args, "--emulator=https://127.0.0.1:1") ||
			!slices.Contains(args, "--load-balancer-class=zerodrop.dev/lab-1") {
			t.Errorf("%s: controller flags %v: want the emulator's wiring instead of the base", mode, args)
		}
		if gate := slices.Contains(args, "--azure-gate-only-load-balancers="+ccmLB); gate != (mode == report.ModeGates) {
			t.Errorf("%s: controller flags %v: the CCM's load balancer for the gates only in gates mode", mode, args)
		}
	}
}
