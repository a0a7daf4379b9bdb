package timing_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/check/timing"
)

func svc(etp corev1.ServiceExternalTrafficPolicy, ann map[string]string, ports ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: ann}}
	s.Spec.ExternalTrafficPolicy = etp
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p})
	}
	return s
}

func TestFor(t *testing.T) {
	tests := []struct {
		name      string
		provider  timing.Provider
		svc       *corev1.Service
		ov        timing.Overrides
		reg, dreg int
		why       string // must appear in the deregistration explanation
	}{
		{"generic", timing.Generic, svc("", nil, 80), timing.NoOverrides, 35, 35, "10 s × 3"},
		{"azure defaults", timing.Azure, svc("", nil, 80), timing.NoOverrides, 15, 15, "5 s × 2"},
		{"azure annotations", timing.Azure, svc("", map[string]string{
			timing.AzureProbeInterval: "10", timing.AzureNumOfProbe: "3",
		}, 80), timing.NoOverrides, 35, 35, "annotation " + timing.AzureProbeInterval},
		{"azure per-port annotation wins, slowest port counts", timing.Azure, svc("", map[string]string{
			timing.AzureProbeInterval: "5", "service.beta.kubernetes.io/port_443_health-probe_interval": "20",
		}, 80, 443), timing.NoOverrides, 45, 45, "port_443_health-probe_interval"},
		{"azure invalid annotation ignored", timing.Azure, svc("", map[string]string{timing.AzureNumOfProbe: "many"}, 80), timing.NoOverrides, 15, 15, "ignored invalid"},
		{"aws IP targets, defaults", timing.AWS, svc("", map[string]string{timing.AWSNLBTargetType: "ip"}, 80), timing.NoOverrides, 35, 305, "deregistration delay 300 s"},
		{"aws IP targets, annotations", timing.AWS, svc("", map[string]string{
			timing.AWSNLBTargetType: "ip", timing.AWSHealthCheckInterval: "5", timing.AWSHealthyThreshold: "2", timing.AWSUnhealthyThreshold: "2",
			timing.AWSTargetGroupAttrs: "deregistration_delay.timeout_seconds=20, stickiness.enabled=false",
		}, 80), timing.NoOverrides, 15, 25, "annotation " + timing.AWSTargetGroupAttrs},
		{"aws deregistration delay 0 leaves the health check", timing.AWS, svc("", map[string]string{
			timing.AWSNLBTargetType: "ip", timing.AWSTargetGroupAttrs: "deregistration_delay.timeout_seconds=0",
		}, 80), timing.NoOverrides, 35, 35, "10 s × 3"},
		// Connection draining applies when an instance leaves the classic
		// ELB, not when a pod behind it terminates.
		{"aws classic ELB connection draining: instance targets", timing.AWS, svc("", map[string]string{
			timing.AWSConnDrainingEnabled: "true", timing.AWSConnDrainingTimeout: "60",
		}, 80), timing.NoOverrides, 35, 35, "does not apply"},
		{"gke Cluster", timing.GKE, svc(corev1.ServiceExternalTrafficPolicyCluster, nil, 80), timing.NoOverrides, 13, 29, "8 s × 3"},
		{"gke Local", timing.GKE, svc(corev1.ServiceExternalTrafficPolicyLocal, nil, 80), timing.NoOverrides, 8, 11, "3 s × 2"},
		{"haproxy", timing.HAProxy, svc("", nil, 80), timing.NoOverrides, 9, 11, "2 s × 3"},
		{"overrides", timing.AWS, svc("", nil, 80), timing.Overrides{Registration: 3, Deregistration: 0}, 3, 0, "--deregistration-seconds"},
		{"nil Service", timing.Azure, nil, timing.NoOverrides, 15, 15, "5 s × 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := timing.For(tc.provider, tc.svc, tc.ov)
			if got.Registration != tc.reg || got.Deregistration != tc.dreg {
				t.Errorf("registration %d, deregistration %d; want %d, %d", got.Registration, got.Deregistration, tc.reg, tc.dreg)
			}
			if !strings.Contains(got.DeregistrationWhy, tc.why) {
				t.Errorf("deregistration explanation %q lacks %q", got.DeregistrationWhy, tc.why)
			}
			if got.RegistrationWhy == "" {
				t.Error("no registration explanation")
			}
		})
	}
}

func TestParseProvider(t *testing.T) {
	for _, p := range timing.Providers {
		if got, err := timing.ParseProvider(string(p)); err != nil || got != p {
			t.Errorf("ParseProvider(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := timing.ParseProvider("digitalocean"); err == nil {
		t.Error("ParseProvider accepted an unknown provider")
	}
}

func TestMax(t *testing.T) {
	got := timing.Max([]timing.Timing{{Registration: 10, Deregistration: 40, DeregistrationWhy: "b"}, {Registration: 20, RegistrationWhy: "a", Deregistration: 5}})
	if got.Registration != 20 || got.Deregistration != 40 || got.RegistrationWhy != "a" || got.DeregistrationWhy != "b" {
		t.Errorf("Max = %+v", got)
	}
}

// TestAWSDeregistrationDelayOnlyForIPTargets: a terminating pod deregisters
// a target only when the target group holds pod IPs. With instance targets
// (the in-tree controller, or target type instance) the target is the node,
// which stays registered, so the target group's deregistration delay does
// not apply.
func TestAWSDeregistrationDelayOnlyForIPTargets(t *testing.T) {
	const (
		lbType     = "service.beta.kubernetes.io/aws-load-balancer-type"
		targetType = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
	)
	tests := []struct {
		name string
		ann  map[string]string
		dreg int
		why  string
	}{
		{"in-tree classic ELB", nil, 35, "instance targets"},
		{"in-tree NLB", map[string]string{lbType: "nlb"}, 35, "instance targets"},
		{"instance target type", map[string]string{lbType: "external", targetType: "instance"}, 35, "instance targets"},
		{"instance targets ignore the delay attribute", map[string]string{lbType: "external", targetType: "instance",
			timing.AWSTargetGroupAttrs: "deregistration_delay.timeout_seconds=120"}, 35, "instance targets"},
		{"IP targets", map[string]string{lbType: "external", targetType: "ip"}, 305, "deregistration delay 300 s"},
		{"legacy nlb-ip", map[string]string{lbType: "nlb-ip"}, 305, "deregistration delay 300 s"},
		{"IP targets with the delay attribute", map[string]string{targetType: "ip",
			timing.AWSTargetGroupAttrs: "deregistration_delay.timeout_seconds=120"}, 125, "deregistration delay 120 s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := timing.For(timing.AWS, svc("", tc.ann, 80), timing.NoOverrides)
			if got.Deregistration != tc.dreg {
				t.Errorf("deregistration %d, want %d: %s", got.Deregistration, tc.dreg, got.DeregistrationWhy)
			}
			if !strings.Contains(got.DeregistrationWhy, tc.why) {
				t.Errorf("deregistration explanation %q lacks %q", got.DeregistrationWhy, tc.why)
			}
		})
	}
}
