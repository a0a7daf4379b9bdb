package install

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartBoundsOldWorkers: the data-plane replica's zerodrop process gets
// the haproxy container's memory limit (--haproxy-memory-limit), from which
// it bounds the old workers, or the chart's fixed number and time bound
// (haproxy.maxOldWorkers, haproxy.hardStopAfter); the haproxy container has
// a memory limit by default.
func TestChartBoundsOldWorkers(t *testing.T) {
	for _, tc := range []struct {
		set      []string
		maxOld   int
		limit    int64
		hardStop time.Duration
	}{
		{limit: 1280 << 20},
		{set: []string{"haproxy.maxOldWorkers=7", "haproxy.hardStopAfter=45m"}, maxOld: 7, limit: 1280 << 20, hardStop: 45 * time.Minute},
		{set: []string{"haproxy.resources.haproxy.limits.memory=2Gi"}, limit: 2 << 30},
	} {
		t.Run(fmt.Sprint(tc.set), func(t *testing.T) {
			objs := render(t, append(append([]string(nil), haproxyValues...), tc.set...)...)
			ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
			hc, zc := ds.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[1]
			dp := containerArgs(t, zc)
			if dp.HAProxy.MaxOldWorkers != tc.maxOld || dp.HAProxy.MemoryLimit != tc.limit || dp.HAProxy.HardStopAfter != tc.hardStop {
				t.Errorf("data-plane process: --haproxy-max-old-workers %d --haproxy-memory-limit %d --haproxy-hard-stop-after %s; want %d, %d and %s",
					dp.HAProxy.MaxOldWorkers, dp.HAProxy.MemoryLimit, dp.HAProxy.HardStopAfter, tc.maxOld, tc.limit, tc.hardStop)
			}
			limit, req := hc.Resources.Limits[corev1.ResourceMemory], hc.Resources.Requests[corev1.ResourceMemory]
			if limit.IsZero() || limit.Cmp(req) < 0 || limit.Value() != tc.limit {
				t.Errorf("haproxy container: memory limit %s, request %s; want %d, at least the request", limit.String(), req.String(), tc.limit)
			}
		})
	}
}
