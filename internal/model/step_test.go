package model

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func states(lb *LoadBalancer) []string {
	var out []string
	for _, l := range lb.Listeners {
		for _, b := range l.Backends {
			out = append(out, b.ID()+"="+string(b.State))
		}
	}
	return out
}

// upOnly reports the backends with these IDs up.
func upOnly(ids ...string) func(string, Backend) bool {
	return func(_ string, b Backend) bool {
		for _, id := range ids {
			if b.ID() == id {
				return true
			}
		}
		return false
	}
}

func drainingBe(addr string) Backend { return Backend{Address: addr, Port: 80, State: Draining} }

func TestStep(t *testing.T) {
	none := func(string, Backend) bool { return false }
	all := func(string, Backend) bool { return true }
	only := func(id string) func(string, Backend) bool {
		return func(_ string, b Backend) bool { return b.ID() == id }
	}
	pct := func(s string) func(string) intstr.IntOrString {
		return func(string) intstr.IntOrString { return intstr.FromString(s) }
	}
	tests := []struct {
		name     string
		observed *LoadBalancer
		desired  *LoadBalancer
		opts     StepOptions
		want     []string
		pending  bool
		// weights, when set, are the weights the step must carry.
		weights map[string]int32
	}{
		{
			name:     "a removed backend drains first",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80))),
			opts:     StepOptions{Drained: all},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=draining"},
			pending:  true,
		},
		{
			name:     "a draining backend with connections stays",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80))),
			opts:     StepOptions{Drained: none},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=draining"},
			pending:  true,
		},
		{
			name:     "a drained backend goes",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80))),
			opts:     StepOptions{Drained: all},
			want:     []string{"10.0.0.1:80=active"},
		},
		{
			name:     "terminating endpoint (desired draining) drains, then goes",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			opts:     StepOptions{Drained: only("10.0.0.2:80")},
			want:     []string{"10.0.0.1:80=active"},
		},
		{
			name:     "a draining backend the load balancer lacks is not added",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			want:     []string{"10.0.0.1:80=active"},
		},
		{
			name: "a rollout drains at most the share, adds the new pool at once",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80), be("10.0.0.3", 80), be("10.0.0.4", 80),
				be("10.0.0.5", 80), be("10.0.0.6", 80), be("10.0.0.7", 80), be("10.0.0.8", 80))),
			desired: lbOf(listener("a", 80, be("10.0.1.1", 80), be("10.0.1.2", 80), be("10.0.1.3", 80), be("10.0.1.4", 80),
				be("10.0.1.5", 80), be("10.0.1.6", 80), be("10.0.1.7", 80), be("10.0.1.8", 80))),
			opts: StepOptions{Drained: all, MaxUnavailable: pct("25%")},
			want: []string{"10.0.0.1:80=draining", "10.0.0.2:80=draining", "10.0.0.3:80=active", "10.0.0.4:80=active",
				"10.0.0.5:80=active", "10.0.0.6:80=active", "10.0.0.7:80=active", "10.0.0.8:80=active",
				"10.0.1.1:80=active", "10.0.1.2:80=active", "10.0.1.3:80=active", "10.0.1.4:80=active",
				"10.0.1.5:80=active", "10.0.1.6:80=active", "10.0.1.7:80=active", "10.0.1.8:80=active"},
			pending: true,
		},
		{
			name:     "at least one per step even when the share rounds to zero",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80)),
			opts:     StepOptions{MaxUnavailable: pct("10%")},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=active"},
			pending:  true,
		},
		{
			name:     "a new listener never gets draining backends",
			observed: lbOf(),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			want:     []string{"10.0.0.1:80=active"},
		},
		{
			name:     "kept listener: a node whose last local pod stops drains at once, outside the budget, and stays",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80), drainingBe("10.0.0.3"))),
			desired:  lbOf(listener("a", 80, drainingBe("10.0.0.1"), drainingBe("10.0.0.2"), drainingBe("10.0.0.3"), drainingBe("10.0.0.4"))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=draining", "10.0.0.3:80=draining", "10.0.0.4:80=draining"},
		},
		{
			name:     "kept listener: a node that leaves still drains, then goes",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			desired:  lbOf(listener("a", 80)),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }},
			want:     []string{"10.0.0.1:80=draining"},
			pending:  true,
		},
		{
			name:     "kept listener: a new listener gets its drained nodes",
			observed: lbOf(),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), drainingBe("10.0.0.2"))),
			opts:     StepOptions{Keep: func(string) bool { return true }},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=draining"},
		},
		{
			name:     "kept listener: the last node up is not drained while its replacement is not up yet",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, drainingBe("10.0.0.1"), be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Up: upOnly("10.0.0.1:80")},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=active"},
			pending:  true,
		},
		{
			name:     "kept listener: once the replacement is up, the node drains",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, drainingBe("10.0.0.1"), be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Up: upOnly("10.0.0.1:80", "10.0.0.2:80")},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=active"},
		},
		{
			name:     "kept listener: two nodes draining at once do not count on each other",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80), be("10.0.0.3", 80))),
			desired:  lbOf(listener("a", 80, drainingBe("10.0.0.1"), drainingBe("10.0.0.2"), be("10.0.0.3", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Up: upOnly("10.0.0.1:80", "10.0.0.2:80")},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=active", "10.0.0.3:80=active"},
			pending:  true,
		},
		{
			name:     "kept listener: a leaving node that is the last up stays until another is up",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Up: upOnly("10.0.0.1:80")},
			want:     []string{"10.0.0.1:80=active", "10.0.0.2:80=active"},
			pending:  true,
		},
		{
			name:     "kept listener: a node that is not up drains at once",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, drainingBe("10.0.0.1"), be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Up: upOnly()},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=active"},
		},
		{
			name:     "kept listener: a staying node whose connections have not ended stays drained, not pending",
			observed: lbOf(listener("a", 80, drainingBe("10.0.0.1"), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: none, Keep: func(string) bool { return true }, Stays: only("10.0.0.1:80")},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=active"},
		},
		{
			name:     "kept listener: a staying node whose connections ended goes",
			observed: lbOf(listener("a", 80, drainingBe("10.0.0.1"), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Stays: only("10.0.0.1:80")},
			want:     []string{"10.0.0.2:80=active"},
		},
		{
			name:     "kept listener: an active node that leaves drains first, staying or not",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.2", 80))),
			opts:     StepOptions{Drained: all, Keep: func(string) bool { return true }, Stays: only("10.0.0.1:80")},
			want:     []string{"10.0.0.1:80=draining", "10.0.0.2:80=active"},
			pending:  true,
		},
		{
			name:     "weight changes of staying backends pass",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80))),
			desired:  lbOf(listener("a", 80, Backend{Address: "10.0.0.1", Port: 80, Weight: 10})),
			want:     []string{"10.0.0.1:80=active"},
			weights:  map[string]int32{"10.0.0.1:80": 10},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, res := Step(tt.observed, tt.desired, tt.opts)
			if diff := cmp.Diff(tt.want, states(got)); diff != "" {
				t.Errorf("step (-want +got):\n%s", diff)
			}
			if res.Pending != tt.pending {
				t.Errorf("pending = %v, want %v", res.Pending, tt.pending)
			}
			if tt.weights != nil {
				weights := map[string]int32{}
				for _, l := range got.Listeners {
					for _, b := range l.Backends {
						weights[b.ID()] = b.Weight
					}
				}
				if diff := cmp.Diff(tt.weights, weights); diff != "" {
					t.Errorf("weights (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestStepConverges: repeated steps with everything drained reach desired,
// and no step takes more than max-unavailable (at least one) of the serving
// backends out of service, counted independently of Step's own budget.
func TestStepConverges(t *testing.T) {
	var old, next []Backend
	for i := 1; i <= 10; i++ {
		old = append(old, be(fmt.Sprintf("10.0.0.%d", i), 80))
		next = append(next, be(fmt.Sprintf("10.0.1.%d", i), 80))
	}
	for _, tc := range []struct {
		maxUnavailable string
		percent        int
	}{{"25%", 25}, {"10%", 10}, {"50%", 50}} {
		t.Run(tc.maxUnavailable, func(t *testing.T) {
			cur := lbOf(listener("a", 80, old...))
			desired := lbOf(listener("a", 80, next...))
			opts := StepOptions{
				Drained:        func(string, Backend) bool { return true },
				MaxUnavailable: func(string) intstr.IntOrString { return intstr.FromString(tc.maxUnavailable) },
			}
			for step := 0; step < 40; step++ {
				nextState, res := Step(cur, desired, opts)
				serving, after := map[string]bool{}, map[string]bool{}
				// Canonical: an unset state is active.
				for _, b := range Canonical(cur).Listeners[0].Backends {
					if b.State == Active {
						serving[b.ID()] = true
					}
				}
				for _, b := range Canonical(nextState).Listeners[0].Backends {
					if b.State == Active {
						after[b.ID()] = true
					}
				}
				taken := 0
				for id := range serving {
					if !after[id] {
						taken++
					}
				}
				limit := max(1, len(serving)*tc.percent/100)
				if taken > limit {
					t.Fatalf("step %d took %d of %d serving backends out of service, max-unavailable %s allows %d: %v -> %v",
						step, taken, len(serving), tc.maxUnavailable, limit, states(cur), states(nextState))
				}
				if len(after) == 0 {
					t.Fatalf("step %d emptied the pool", step)
				}
				cur = nextState
				if !res.Pending {
					if d := cmp.Diff(Canonical(desired), Canonical(cur)); d != "" {
						t.Fatalf("not pending but not desired (-want +got):\n%s", d)
					}
					return
				}
			}
			t.Fatalf("did not converge: %v", states(cur))
		})
	}
}
