package model

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Limits cap what Services may make every data-plane replica do (issue 46,
// M8). Every replica checks every backend of every listener, so the health
// checks a Service causes are multiplied by its ports and its backends on
// each edge node. A zero field is no cap.
type Limits struct {
	// MaxPorts caps spec.ports of one Service. A Service over it is refused
	// like a bad annotation (invariant 7): one that is not served yet is not
	// served; one that is keeps its listeners as they are, backends
	// following its endpoints, and a change to them is refused.
	MaxPorts int
	// MaxServiceCheckRate caps the health checks per second one Service
	// makes one replica run (ServiceCheckRate); a Service over it has its
	// check intervals stretched (FitChecks), its backends all kept.
	MaxServiceCheckRate float64
	// NodeCheckBudget caps the health checks per second one replica runs
	// for all the Services it serves; past it the newest Services yield
	// (FitChecks).
	NodeCheckBudget float64
}

// Defaults of the limits, chosen so that no ordinary Service meets them:
// real Services have a few ports and are checked every 2 to 5 s, so 64 ports
// and 1,000 checks a second (500 backends at the default 2 s) are far off,
// and 10,000 a second per replica is 5,000 Services of two backends each at
// the default interval (docs/scale.md runs 5,000 load balancers).
const (
	DefaultMaxPorts            = 64
	DefaultMaxServiceCheckRate = 1000
	DefaultNodeCheckBudget     = 10000
)

// DefaultLimits are the limits the controller runs with unless its flags
// say otherwise.
func DefaultLimits() Limits {
	return Limits{MaxPorts: DefaultMaxPorts, MaxServiceCheckRate: DefaultMaxServiceCheckRate, NodeCheckBudget: DefaultNodeCheckBudget}
}

// Validate refuses negative or non-finite limits.
func (l Limits) Validate() error {
	if l.MaxPorts < 0 {
		return fmt.Errorf("max ports per Service %d: want 0 (no cap) or more", l.MaxPorts)
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"max health checks per second per Service", l.MaxServiceCheckRate}, {"health-check budget per replica", l.NodeCheckBudget}} {
		if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			return fmt.Errorf("%s %v: want 0 (no cap) or a positive number", v.name, v.v)
		}
	}
	return nil
}

// Limit names, as LimitError and the metrics name them.
const (
	LimitPorts = "ports"
)

// LimitError is a Service over one of the Limits that is refused.
type LimitError struct {
	Limit   string
	Message string
}

func (e *LimitError) Error() string { return e.Message }

// CheckService refuses a Service over the port cap. It counts spec.ports,
// every protocol: what the Service asks for, whatever the provider serves.
func (l Limits) CheckService(svc *corev1.Service) error {
	if n := len(svc.Spec.Ports); l.MaxPorts > 0 && n > l.MaxPorts {
		return &LimitError{Limit: LimitPorts, Message: fmt.Sprintf(
			"%d ports, over the cap of %d per Service (the controller's --max-ports-per-service): every data-plane replica checks every port of every backend", n, l.MaxPorts)}
	}
	return nil
}

// ServiceCheckRate is the health checks per second one data-plane replica
// runs for the listeners of svcKey (namespace/name) in lb: for each listener,
// its backends (draining ones are checked too) divided by its interval. A
// backend in transition is checked at a shorter fastinter for its few rise or
// fall checks (docs/haproxy.md); the steady rate is what is counted.
func ServiceCheckRate(lb *LoadBalancer, svcKey string) float64 {
	return checkRate(lb, svcKey+"/")
}

// CheckRate is ServiceCheckRate over every listener of lb.
func CheckRate(lb *LoadBalancer) float64 { return checkRate(lb, "") }

func checkRate(lb *LoadBalancer, prefix string) float64 {
	if lb == nil {
		return 0
	}
	total := 0.0
	for _, l := range lb.Listeners {
		if !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		inter := float64(l.Probe.IntervalMillis)
		if inter <= 0 {
			inter = float64(DefaultHealthCheckInterval.Milliseconds())
		}
		total += float64(len(l.Backends)) * 1000 / inter
	}
	return total
}

// CheckDemand is the health checks per second a Service asks of one replica
// (ServiceCheckRate of its listeners at the intervals it asks for).
type CheckDemand struct {
	// Service is namespace/name.
	Service string
	// Created is the Service's creation time: older Services keep their
	// checks first.
	Created time.Time
	Rate    float64
}

// MaxCheckStretch is the most a check interval is stretched (2 s becomes
// 34 min): past it a Service that still does not fit is left there, and the
// replica's total is over its budget (zerodrop_health_checks_per_second
// shows it).
const MaxCheckStretch = 1024

// FitChecks is the factor each Service's check intervals are multiplied by
// (1: as asked) so that no Service is over perService checks per second and
// the sum is within budget (0: no cap). Factors are powers of two, so that a
// demand that moves a little (a pod more or less) rarely changes one. The
// older Services keep what they ask first: in order of creation (then name)
// each gets the smallest factor that fits what the older ones left, so a new
// Service never makes an older one yield, and the answer depends on the
// demands alone, not on the order reconciles came in (a restart changes
// nothing: invariant 1). Backends are never dropped: only checked less often.
func FitChecks(demands []CheckDemand, perService, budget float64) map[string]int {
	sorted := append([]CheckDemand(nil), demands...)
	sort.Slice(sorted, func(i, j int) bool {
		if !sorted[i].Created.Equal(sorted[j].Created) {
			return sorted[i].Created.Before(sorted[j].Created)
		}
		return sorted[i].Service < sorted[j].Service
	})
	left := budget
	out := make(map[string]int, len(sorted))
	for _, d := range sorted {
		f, r := 1, d.Rate
		for f < MaxCheckStretch && (perService > 0 && r > perService || budget > 0 && r > left) {
			f *= 2
			r = d.Rate / float64(f)
		}
		out[d.Service] = f
		left = max(left-r, 0)
	}
	return out
}

// OwnCheckFactor is the factor FitChecks gives a Service asking rate checks a
// second where the budget leaves it all it asks: the smallest power of two
// (at most MaxCheckStretch) that brings it to perService or under (1 with no
// cap), and the rate it then asks.
func OwnCheckFactor(rate, perService float64) (int, float64) {
	f, r := 1, rate
	for f < MaxCheckStretch && perService > 0 && r > perService {
		f *= 2
		r = rate / float64(f)
	}
	return f, r
}

// StretchChecks multiplies the check interval of svcKey's listeners in lb by
// factor, at most to the largest interval a Probe holds.
func StretchChecks(lb *LoadBalancer, svcKey string, factor int) {
	if lb == nil || factor <= 1 {
		return
	}
	for i := range lb.Listeners {
		l := &lb.Listeners[i]
		if !strings.HasPrefix(l.Name, svcKey+"/") {
			continue
		}
		inter := int64(l.Probe.IntervalMillis)
		if inter <= 0 {
			inter = DefaultHealthCheckInterval.Milliseconds()
		}
		l.Probe.IntervalMillis = int32(min(inter*int64(factor), math.MaxInt32))
	}
}
