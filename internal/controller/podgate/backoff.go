package podgate

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// backoffDivisor sets how much later than served a pod that stays unserved
// is seen at most: the next check of a pod the gate has checked for a time
// W comes W/backoffDivisor later (never sooner than PollInterval, never
// later than MaxPollInterval). A pod its load balancers serve after T is
// then seen by T + T/10 + PollInterval: a load balancer that takes seconds
// to register and health-check a new pod, the usual case, costs a rollout
// a tenth of that wait, not a doubling of it, while a pod that is never
// served is checked every MaxPollInterval once it has waited ten times
// that (issue 46, M7). A back-off by the number of checks (4 fast checks,
// then doubling) saw a pod served a little after 2 s up to 1 to 3 s late.
const backoffDivisor = 10

// nextCheck is how long to wait before checking again a pod that the gate
// has found not served for waited, the sum of the delays it gave the pod's
// checks so far (the time it actually waited is at least that: queue and
// read-budget waits only add to it).
func (o *Options) nextCheck(waited time.Duration) time.Duration {
	return min(max(o.PollInterval, waited/backoffDivisor), o.MaxPollInterval)
}

// unservedPods holds, for each pod the gate keeps checking, the checks in a
// row that found it not served and the delays they gave, and publishes how many such pods each
// namespace has (zerodrop_readiness_gate_unserved_pods). A pod leaves it
// when it is served, no longer waits for the gate, or is gone: every pod in
// it is checked again later (RequeueAfter), so none stays behind.
type unservedPods struct {
	mu    sync.Mutex
	pods  map[types.NamespacedName]unserved
	perNS map[string]int
	// gauge, by namespace; nil: not published.
	gauge *prometheus.GaugeVec
}

func newUnservedPods(gauge *prometheus.GaugeVec) *unservedPods {
	return &unservedPods{pods: map[types.NamespacedName]unserved{}, perNS: map[string]int{}, gauge: gauge}
}

// unserved is one pod's record: checks in a row that found it not served,
// and the sum of the delays they gave.
type unserved struct {
	checks int
	waited time.Duration
}

// miss records one more check that found the pod not served and returns how
// many in a row did and the delay next gives the next one (next gets the
// delays given so far).
func (u *unservedPods) miss(key types.NamespacedName, next func(waited time.Duration) time.Duration) (int, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.pods[key]
	if p.checks == 0 {
		u.perNS[key.Namespace]++
		u.publish(key.Namespace)
	}
	d := next(p.waited)
	p.checks++
	p.waited += d
	u.pods[key] = p
	return p.checks, d
}

// forget drops the pod: served, not waiting for the gate, or gone.
func (u *unservedPods) forget(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.pods[key]; !ok {
		return
	}
	delete(u.pods, key)
	u.perNS[key.Namespace]--
	u.publish(key.Namespace)
}

// publish sets the namespace's gauge; a namespace with no unserved pod
// left loses its series rather than keeping a 0 forever, so the metric has
// one series per namespace with pods waiting, not per namespace that ever
// had some.
func (u *unservedPods) publish(ns string) {
	n := u.perNS[ns]
	if n == 0 {
		delete(u.perNS, ns)
	}
	if u.gauge == nil {
		return
	}
	if n == 0 {
		u.gauge.DeleteLabelValues(ns)
		return
	}
	u.gauge.WithLabelValues(ns).Set(float64(n))
}
