package haproxy

import (
	"fmt"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestOldWorkerBoundDerived: with no fixed number, the old workers are
// bounded to what fits in the memory limit beside the configuration: many
// at a few dozen listeners (no WebSocket is ended for it), a handful at
// thousands, at least one when even one does not fit; a fixed number wins;
// without a limit there is no bound. The rendered global carries it.
func TestOldWorkerBoundDerived(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		fixed     int
		limit     int64
		listeners int
		want      int
	}{
		{limit: 1280 * mi, listeners: 20, want: 226},  // (1274 MiB / 5.57 MiB) - 2.5
		{limit: 1280 * mi, listeners: 5000, want: 6},  // 1274 / 146.6 - 2.5
		{limit: 1280 * mi, listeners: 10000, want: 1}, // 1274 / 288.2 - 2.5 = 1.9
		{limit: 256 * mi, listeners: 10000, want: 1},  // not even one fits: one
		{fixed: 3, limit: 1280 * mi, listeners: 20, want: 3},
		{limit: 0, listeners: 5000, want: 0},
	} {
		t.Run(fmt.Sprintf("%d/%d/%d", tc.fixed, tc.limit/mi, tc.listeners), func(t *testing.T) {
			proxies := make([]proxySpec, tc.listeners)
			if got := oldWorkerBound(tc.fixed, tc.limit, proxies); got != tc.want {
				t.Errorf("oldWorkerBound(%d, %d MiB, %d listeners) = %d, want %d", tc.fixed, tc.limit/mi, tc.listeners, got, tc.want)
			}
		})
	}
	p := &Provider{opts: Options{MemoryLimit: 1280 * mi}, paths: paths{admin: "/a", state: "/s", meta: "/m"}}
	lbs := map[string]*model.LoadBalancer{}
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("ns/s%d", i)
		lbs[key] = &model.LoadBalancer{Key: key, Listeners: []model.Listener{{Name: "tcp-80", Address: "127.0.0.1", Port: int32(8000 + i), Protocol: model.TCP}}}
	}
	cfg, _, err := p.render(lbs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "    mworker-max-reloads 226\n") {
		t.Errorf("rendered global lacks the derived bound:\n%s", cfg[:min(len(cfg), 600)])
	}
}
