package podgate

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// fastChecks is how many checks in a row of a pod not served yet come
// every PollInterval before the checks back off: a pod its load balancers
// register within the first couple of seconds, the usual case, is seen as
// soon as without the back-off.
const fastChecks = 4

// nextCheck is how long to wait before checking again a pod that the last
// misses checks in a row found not served: PollInterval for the first
// fastChecks, then doubling up to MaxPollInterval (issue 46, M7). A pod
// that stays unserved, e.g. behind a load balancer that never registers it,
// then costs a fraction of the reads it did, which leaves them to the pods
// about to be served; a pod served late is seen at most MaxPollInterval
// after.
func (o *Options) nextCheck(misses int) time.Duration {
	d := o.PollInterval
	for i := fastChecks; i < misses && d < o.MaxPollInterval; i++ {
		d *= 2
	}
	return min(d, o.MaxPollInterval)
}

// unservedPods counts, for each pod the gate keeps checking, the checks in
// a row that found it not served, and publishes how many such pods each
// namespace has (zerodrop_readiness_gate_unserved_pods). A pod leaves it
// when it is served, no longer waits for the gate, or is gone: every pod in
// it is checked again later (RequeueAfter), so none stays behind.
type unservedPods struct {
	mu    sync.Mutex
	pods  map[types.NamespacedName]int
	perNS map[string]int
	// gauge, by namespace; nil: not published.
	gauge *prometheus.GaugeVec
}

func newUnservedPods(gauge *prometheus.GaugeVec) *unservedPods {
	return &unservedPods{pods: map[types.NamespacedName]int{}, perNS: map[string]int{}, gauge: gauge}
}

// miss records one more check that found the pod not served and returns
// how many in a row did.
func (u *unservedPods) miss(key types.NamespacedName) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.pods[key] + 1
	u.pods[key] = n
	if n == 1 {
		u.perNS[key.Namespace]++
		u.publish(key.Namespace)
	}
	return n
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
