package aws

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHealthCheck: a scaled health check is refused outside AWS's ranges,
// and becomes the CCM's annotations — the interval with a timeout no
// longer than it, both thresholds — on the workload's Service, beside the
// NLB annotation; the CCM's own check adds none. The steady wait follows
// the slower check.
func TestHealthCheck(t *testing.T) {
	for _, tc := range []struct {
		hc     HealthCheck
		ok     bool
		annots map[string]string
		turn   time.Duration
	}{
		{HealthCheck{}, true, map[string]string{}, 90 * time.Second}, // the CCM's Cluster check: 3 · 30 s
		{HealthCheck{Interval: 5 * time.Second, Thresholds: 2}, true, map[string]string{
			annotationHCInterval: "5", annotationHCTimeout: "5", annotationHCHealthy: "2", annotationHCUnhealthy: "2"}, 10 * time.Second},
		{HealthCheck{Interval: 60 * time.Second}, true, map[string]string{
			annotationHCInterval: "60", annotationHCTimeout: "10"}, 180 * time.Second},
		{HealthCheck{Thresholds: 10}, true, map[string]string{annotationHCHealthy: "10", annotationHCUnhealthy: "10"}, 300 * time.Second},
		{HealthCheck{Interval: 4 * time.Second}, false, nil, 0},
		{HealthCheck{Interval: 301 * time.Second}, false, nil, 0},
		{HealthCheck{Interval: 5500 * time.Millisecond}, false, nil, 0},
		{HealthCheck{Thresholds: 1}, false, nil, 0},
		{HealthCheck{Thresholds: 11}, false, nil, 0},
	} {
		if err := tc.hc.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate %v, want ok %v", tc.hc, err, tc.ok)
		}
		if !tc.ok {
			continue
		}
		a := &run{w: New(Options{HealthCheck: tc.hc})}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "lab-1", Name: "web"}}
		a.Service(svc)
		want := maps.Clone(tc.annots)
		want[nlbAnnotation] = "nlb"
		if !maps.Equal(svc.Annotations, want) {
			t.Errorf("%+v: annotations %v, want %v", tc.hc, svc.Annotations, want)
		}
		if got := tc.hc.turnHealthy(); got != tc.turn {
			t.Errorf("%+v: turns healthy within %s, want %s", tc.hc, got, tc.turn)
		}
	}
}
