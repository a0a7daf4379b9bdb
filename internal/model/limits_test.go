package model

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// listenerWith is a listener of Service shop/<svc> with n backends probed
// every intervalMillis.
func listenerWith(svcName string, port int32, n int, intervalMillis int32) Listener {
	l := Listener{Name: ListenerName("shop", svcName, corev1.ProtocolTCP, port), Port: port, Protocol: TCP,
		Probe: Probe{Kind: ProbeTCP, IntervalMillis: intervalMillis, Rise: DefaultRise, Fall: DefaultFall}}
	for i := 0; i < n; i++ {
		l.Backends = append(l.Backends, Backend{Address: "10.0.0.1", Port: int32(8000 + i), Weight: DefaultWeight, State: Active})
	}
	return l
}

// TestCheckRate: checks per second one replica runs for a Service = the sum
// over its listeners of backends / interval; draining backends are checked too.
func TestCheckRate(t *testing.T) {
	drain := listenerWith("api", 443, 2, 500)
	drain.Backends[1].State, drain.Backends[1].Weight = Draining, 0
	lb := &LoadBalancer{Listeners: []Listener{
		listenerWith("web", 80, 4, 2000), // 2/s
		listenerWith("web", 81, 10, 100), // 100/s
		drain,                            // 4/s
		listenerWith("webshop", 80, 3, 1000),
	}}
	for _, tc := range []struct {
		svc  string
		want float64
	}{{"shop/web", 102}, {"shop/api", 4}, {"shop/webshop", 3}, {"shop/none", 0}} {
		if got := ServiceCheckRate(lb, tc.svc); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ServiceCheckRate(%s) = %v, want %v", tc.svc, got, tc.want)
		}
	}
	if got := CheckRate(lb); math.Abs(got-109) > 1e-9 {
		t.Errorf("CheckRate = %v, want 109", got)
	}
	if got := CheckRate(nil); got != 0 {
		t.Errorf("CheckRate(nil) = %v", got)
	}
}

// TestCheckPorts: a Service with more ports than the cap is refused with a
// LimitError naming the cap; at the cap, or with no cap, it passes.
func TestCheckPorts(t *testing.T) {
	ports := func(n int) *corev1.Service {
		return svc(func(s *corev1.Service) {
			s.Spec.Ports = nil
			for i := 0; i < n; i++ {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: int32(1000 + i), Protocol: corev1.ProtocolTCP})
			}
		})
	}
	for _, tc := range []struct {
		name       string
		ports, max int
		refused    bool
	}{
		{"under", 3, 4, false},
		{"at the cap", 4, 4, false},
		{"over", 5, 4, true},
		{"no cap", 500, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Limits{MaxPorts: tc.max}.CheckService(ports(tc.ports))
			var le *LimitError
			if got := errors.As(err, &le); got != tc.refused {
				t.Fatalf("refused = %v (%v), want %v", got, err, tc.refused)
			}
			if tc.refused && le.Limit != LimitPorts {
				t.Errorf("limit = %q, want %q", le.Limit, LimitPorts)
			}
		})
	}
}

// TestFitChecks is the budget arithmetic: a Service over the per-Service
// rate is stretched alone; past the node budget the newest Services yield
// (creation time, then name), each by the smallest power of two that fits
// what the older ones left; nothing older ever yields to something newer.
func TestFitChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := func(name string, age int, rate float64) CheckDemand {
		return CheckDemand{Service: name, Created: t0.Add(time.Duration(age) * time.Minute), Rate: rate}
	}
	for _, tc := range []struct {
		name               string
		demands            []CheckDemand
		perService, budget float64
		want               map[string]int
	}{
		{"no limits", []CheckDemand{d("a", 0, 1e6)}, 0, 0, map[string]int{"a": 1}},
		{"all fit", []CheckDemand{d("a", 0, 100), d("b", 1, 200)}, 1000, 300, map[string]int{"a": 1, "b": 1}},
		{"per-Service cap alone", []CheckDemand{d("a", 0, 2500), d("b", 1, 10)}, 1000, 0, map[string]int{"a": 4, "b": 1}},
		{"the newest yields", []CheckDemand{d("new", 2, 300), d("old", 0, 400), d("mid", 1, 200)}, 0, 700,
			map[string]int{"old": 1, "mid": 1, "new": 4}}, // 100 left: 300/4 = 75
		{"ties by name", []CheckDemand{d("b", 0, 60), d("a", 0, 60)}, 0, 100, map[string]int{"a": 1, "b": 2}},
		{"older keep even when larger", []CheckDemand{d("big", 0, 900), d("small", 1, 20)}, 0, 910,
			map[string]int{"big": 1, "small": 2}},
		{"an idle Service costs nothing", []CheckDemand{d("a", 0, 100), d("idle", 1, 0)}, 0, 100, map[string]int{"a": 1, "idle": 1}},
		{"nothing left: the most stretch", []CheckDemand{d("a", 0, 100), d("b", 1, 50)}, 0, 100,
			map[string]int{"a": 1, "b": MaxCheckStretch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FitChecks(tc.demands, tc.perService, tc.budget)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("factors (-want +got):\n%s", diff)
			}
			// Whatever the order given, the same answer.
			rev := append([]CheckDemand(nil), tc.demands...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			if diff := cmp.Diff(got, FitChecks(rev, tc.perService, tc.budget)); diff != "" {
				t.Errorf("order changed the answer:\n%s", diff)
			}
			total := 0.0
			for _, dm := range tc.demands {
				r := dm.Rate / float64(got[dm.Service])
				if tc.perService > 0 && r > tc.perService {
					t.Errorf("%s: %v checks/s over the per-Service cap %v", dm.Service, r, tc.perService)
				}
				total += r
			}
			if tc.budget > 0 && total > tc.budget && tc.name != "nothing left: the most stretch" {
				t.Errorf("total %v checks/s over the budget %v", total, tc.budget)
			}
		})
	}
}

// TestStretchChecks multiplies the intervals of one Service's listeners only,
// and never wraps an interval around.
func TestStretchChecks(t *testing.T) {
	lb := &LoadBalancer{Listeners: []Listener{listenerWith("web", 80, 1, 2000), listenerWith("web", 81, 1, math.MaxInt32/2+1),
		listenerWith("webshop", 80, 1, 2000)}}
	StretchChecks(lb, "shop/web", 4)
	got := []int32{lb.Listeners[0].Probe.IntervalMillis, lb.Listeners[1].Probe.IntervalMillis, lb.Listeners[2].Probe.IntervalMillis}
	if want := []int32{8000, math.MaxInt32, 2000}; !cmp.Equal(got, want) {
		t.Errorf("intervals = %v, want %v", got, want)
	}
}
