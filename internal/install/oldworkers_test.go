package install

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartBoundsOldWorkers: the data-plane replica's zerodrop process gets
// the chart's old-worker bounds (haproxy.maxOldWorkers,
// haproxy.hardStopAfter) and the haproxy container a memory limit, which
// holds only while the old workers are bounded.
func TestChartBoundsOldWorkers(t *testing.T) {
	for _, tc := range []struct {
		set      []string
		maxOld   int
		hardStop time.Duration
	}{
		{maxOld: 4},
		{set: []string{"haproxy.maxOldWorkers=7", "haproxy.hardStopAfter=45m"}, maxOld: 7, hardStop: 45 * time.Minute},
	} {
		t.Run(fmt.Sprint(tc.set), func(t *testing.T) {
			objs := render(t, append(append([]string(nil), haproxyValues...), tc.set...)...)
			ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
			hc, zc := ds.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[1]
			dp := containerArgs(t, zc)
			if dp.HAProxy.MaxOldWorkers != tc.maxOld || dp.HAProxy.HardStopAfter != tc.hardStop {
				t.Errorf("data-plane process: --haproxy-max-old-workers %d --haproxy-hard-stop-after %s; want %d and %s",
					dp.HAProxy.MaxOldWorkers, dp.HAProxy.HardStopAfter, tc.maxOld, tc.hardStop)
			}
			limit, req := hc.Resources.Limits[corev1.ResourceMemory], hc.Resources.Requests[corev1.ResourceMemory]
			if limit.IsZero() || limit.Cmp(req) < 0 {
				t.Errorf("haproxy container: memory limit %s, request %s; want a limit of at least the request", limit.String(), req.String())
			}
		})
	}
}
