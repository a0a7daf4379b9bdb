package model

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func lbOf(listeners ...Listener) *LoadBalancer {
	return &LoadBalancer{Key: "default/web", Listeners: listeners}
}

func listener(name string, port int32, backends ...Backend) Listener {
	return Listener{Name: name, Address: "127.0.100.1", Port: port, Protocol: TCP,
		Probe: Probe{Kind: ProbeTCP, IntervalMillis: 2000, Rise: 2, Fall: 3}, Backends: backends}
}

func be(addr string, port int32) Backend { return Backend{Address: addr, Port: port} }

func TestDiff(t *testing.T) {
	drained := be("10.0.0.2", 80)
	drained.State = Draining
	moved := listener("a", 81, be("10.0.0.1", 80))
	tests := []struct {
		name     string
		observed *LoadBalancer
		desired  *LoadBalancer
		want     []string
		create   bool
	}{
		{name: "both absent"},
		{name: "identical", observed: lbOf(listener("a", 80, be("10.0.0.1", 80))), desired: lbOf(listener("a", 80, be("10.0.0.1", 80)))},
		{name: "order and defaults do not matter",
			observed: lbOf(listener("b", 90), listener("a", 80, be("10.0.0.2", 80), Backend{Address: "10.0.0.1", Port: 80, Weight: DefaultWeight, State: Active})),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80)), listener("b", 90))},
		{name: "create", desired: lbOf(listener("a", 80, be("10.0.0.1", 80))), create: true, want: []string{"create-listener a"}},
		{name: "delete", observed: lbOf(listener("a", 80)), want: []string{"delete-listener a"}},
		{name: "scale up and down",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.2", 80), be("10.0.0.3", 80))),
			want:     []string{"remove-backend a 10.0.0.1:80", "add-backend a 10.0.0.3:80"}},
		{name: "drain is an update",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 80), drained)),
			want:     []string{"update-backend a 10.0.0.2:80"}},
		{name: "frontend change keeps backends",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80))),
			desired:  lbOf(moved),
			want:     []string{"update-listener a"}},
		{name: "port is part of backend identity",
			observed: lbOf(listener("a", 80, be("10.0.0.1", 80))),
			desired:  lbOf(listener("a", 80, be("10.0.0.1", 8080))),
			want:     []string{"remove-backend a 10.0.0.1:80", "add-backend a 10.0.0.1:8080"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Diff(tt.observed, tt.desired)
			var got []string
			for _, op := range plan.Ops {
				got = append(got, op.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ops (-want +got):\n%s", diff)
			}
			if plan.Create != tt.create {
				t.Errorf("create = %v, want %v", plan.Create, tt.create)
			}
			if tt.desired != nil || tt.observed != nil {
				after, err := Apply(tt.observed, plan)
				if err != nil {
					t.Fatalf("apply: %v", err)
				}
				if tt.desired == nil {
					if len(after.Listeners) != 0 {
						t.Errorf("listeners left after deleting: %v", after.Listeners)
					}
				} else if d := cmp.Diff(canon(tt.desired), canon(after)); d != "" {
					t.Errorf("apply(observed, diff) != desired (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestDiffKeepsVersion(t *testing.T) {
	obs := lbOf(listener("a", 80))
	obs.Version = "etag-1"
	if got := Diff(obs, lbOf(listener("a", 81))).Version; got != "etag-1" {
		t.Fatalf("plan version = %q, want the observed one", got)
	}
}

func TestFullPlanRewritesEverything(t *testing.T) {
	x := lbOf(listener("a", 80, be("10.0.0.1", 80), be("10.0.0.2", 80)), listener("b", 90))
	plan := FullPlan(x, x)
	counts := plan.Counts()
	if counts[OpUpdateListener] != 2 || counts[OpUpdateBackend] != 2 || len(plan.Ops) != 4 {
		t.Fatalf("full plan on an unchanged load balancer = %v, want every listener and backend written", plan)
	}
	after, err := Apply(x, plan)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(canon(x), canon(after)); d != "" {
		t.Fatalf("full plan changed the load balancer (-before +after):\n%s", d)
	}
	if !Diff(x, x).Empty() {
		t.Fatal("diff of an unchanged load balancer is not empty")
	}
}

func TestApplyRejectsInconsistentPlans(t *testing.T) {
	x := lbOf(listener("a", 80, be("10.0.0.1", 80)))
	bad := []Plan{
		{Ops: []Op{{Kind: OpCreateListener, Listener: "a", Spec: &Listener{Name: "a"}}}},
		{Ops: []Op{{Kind: OpDeleteListener, Listener: "z"}}},
		{Ops: []Op{{Kind: OpAddBackend, Listener: "a", Backend: &Backend{Address: "10.0.0.1", Port: 80}}}},
		{Ops: []Op{{Kind: OpRemoveBackend, Listener: "a", Backend: &Backend{Address: "10.0.0.9", Port: 80}}}},
		{Ops: []Op{{Kind: "explode", Listener: "a"}}},
	}
	for i, p := range bad {
		if _, err := Apply(x, p); err == nil {
			t.Errorf("plan %d: no error", i)
		}
	}
	if _, err := Apply(nil, Plan{Ops: []Op{{Kind: OpDeleteListener, Listener: "a"}}}); err == nil {
		t.Error("a plan for a missing load balancer without Create must fail")
	}
}

// decodeLB builds a small load balancer from fuzz bytes: few distinct names,
// addresses and ports so that two decoded values overlap often.
func decodeLB(data []byte) *LoadBalancer {
	if len(data) == 0 {
		return nil
	}
	lb := &LoadBalancer{Key: "k"}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for n := int(next() % 4); n > 0; n-- {
		h := next()
		l := Listener{
			Name:     fmt.Sprintf("l%d", h%3),
			Address:  fmt.Sprintf("127.0.0.%d", h%2+1),
			Port:     80 + int32((h>>1)%2),
			Protocol: TCP,
			// The probe varies on its own bit, so two listeners can differ in
			// their probe only.
			Probe: Probe{Kind: ProbeTCP, IntervalMillis: 1000 * (1 + int32((h>>2)%2)), Rise: 2, Fall: 3},
		}
		for m := int(next() % 5); m > 0; m-- {
			c := next()
			b := Backend{Address: fmt.Sprintf("10.0.0.%d", c%4), Port: 8080 + int32(c%2), Weight: int32(c%3) * 50}
			if c&0x80 != 0 {
				b.State = Draining
			}
			l.Backends = append(l.Backends, b)
		}
		lb.Listeners = append(lb.Listeners, l)
	}
	return lb
}

// canon is a load balancer's canonical form for cmp: Version is the
// provider's token, not content, so it is cleared. FuzzDiff compares with cmp,
// never with Diff or Equal, so that a Diff that misses a field (a probe, a
// weight) cannot hide its own mistake.
func canon(lb *LoadBalancer) *LoadBalancer {
	c := Canonical(lb)
	if c != nil {
		c.Version = ""
	}
	return c
}

func FuzzDiff(f *testing.F) {
	f.Add([]byte{}, []byte{1, 2, 3})
	f.Add([]byte{2, 0, 3, 1, 2, 3, 1, 1, 9}, []byte{2, 0, 3, 1, 2, 200, 1, 1, 9})
	f.Add([]byte{3, 5, 4, 1, 2, 3, 4, 7, 0, 6, 1, 128}, []byte{1, 7, 2, 255, 254})
	// Same listener and backend, only the probe interval differs (h=0 vs h=12).
	f.Add([]byte{1, 0, 1, 1}, []byte{1, 12, 1, 1})
	// Same backend, only its weight differs (c=1: 50, c=9: 0, the default 100).
	f.Add([]byte{1, 0, 1, 1}, []byte{1, 0, 1, 9})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		x, y := decodeLB(a), decodeLB(b)
		if p := Diff(x, x); !p.Empty() {
			t.Fatalf("Diff(x, x) = %v, want empty", p)
		}
		if x == nil && y == nil {
			return
		}
		want := y
		if want == nil {
			// A nil desired means "no listeners left" for an existing one.
			want = &LoadBalancer{Key: x.Key}
		}
		// Diff is empty exactly when the canonical forms are equal.
		if empty, same := Diff(x, want).Empty(), cmp.Equal(canon(x), canon(want)); empty != same {
			t.Fatalf("Diff(x, y).Empty() = %v but canonical x == canonical y is %v\nx=%+v\ny=%+v\n%s",
				empty, same, x, want, cmp.Diff(canon(x), canon(want)))
		}
		for _, plan := range []Plan{Diff(x, y), FullPlan(x, y)} {
			got, err := Apply(x, plan)
			if err != nil {
				t.Fatalf("apply %v: %v", plan, err)
			}
			if d := cmp.Diff(canon(want), canon(got)); d != "" {
				t.Fatalf("Apply(x, plan) != y (-want +got):\n%s\nx=%+v\nplan=%v", d, x, plan)
			}
		}
	})
}
