package drain

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// settling is a scripted provider whose data plane takes a removal on an
// hour late (provider.Settler): a call that waits for the settle ends at
// its bound.
type settling struct{ scripted }

func (settling) RemovalSettle(string, string) time.Duration { return time.Hour }

// TestNodeLocalLastPodAnswersOnProbeDownNews: zerodrop's own load balancer,
// node mode, the pod its node's last local endpoint of a Local Service.
// The node's probe going Down, read as news after the deletion began (rule
// health: Up in a read begun after then, Down in a later one), says the
// load balancer stopped sending to it — with the node still active in the
// pool (its drain held for the replacement node, or still being written),
// and without the settle a drain read from the pool waits for. A Down that
// is not news (no Up read after the deletion) proves nothing: the call
// meets its bound.
func TestNodeLocalLastPodAnswersOnProbeDownNews(t *testing.T) {
	// n1's rule health on the Service's listener: read at, Up or not, and
	// the last read begun after the deletion that had it Up (zero: none).
	n1 := func(state model.BackendState, probedAt time.Time, up bool, upAt time.Time) []provider.BackendStatus {
		bs := nodeStatus(state, model.Active, true)
		bs[0].Healthy, bs[0].Lags, bs[0].Probed, bs[0].ProbedAt, bs[0].UpAt, bs[0].Connections = up, true, true, probedAt, upAt, -1
		return bs
	}
	for _, tc := range []struct {
		name  string
		state model.BackendState // n1 in the pool, as read back
		news  bool               // an Up read after the deletion comes before the Down
		want  string
	}{
		{name: "node held active, its probe Down as news", state: model.Active, news: true, want: "drained"},
		{name: "node drained in the pool, its probe Down as news: no settle", state: model.Draining, news: true, want: "drained"},
		{name: "node held active, its probe Down without an Up read after the deletion", state: model.Active, want: "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int64
			var upRead atomic.Pointer[time.Time]
			prov := settling{scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
				n, now := reads.Add(1), time.Now()
				switch {
				case n <= 2: // read before the deletion
					return n1(tc.state, now.Add(-time.Hour), false, time.Time{}), nil
				case n <= 4 || !tc.news: // after it, never Up: may describe the node before it came up
					return n1(tc.state, now, false, time.Time{}), nil
				case n <= 6:
					upRead.CompareAndSwap(nil, &now)
					return n1(tc.state, now, true, now), nil
				}
				return n1(tc.state, now, false, *upRead.Load()), nil
			}}}
			h := nodeFixture(t, nodeCase{policy: corev1.ServiceExternalTrafficPolicyLocal}, 4*time.Second, prov,
				Options{KubeProxyFallback: time.Hour})
			a := callNodeGate(t, h)
			if a.err != nil || a.result != tc.want {
				t.Fatalf("got %d %q %q (%v), want %s", a.code, a.result, a.body, a.err, tc.want)
			}
			if tc.want == "drained" && reads.Load() < 7 {
				t.Fatalf("answered after %d reads, want it to wait through the stale Down and the Up reads", reads.Load())
			}
		})
	}
}
