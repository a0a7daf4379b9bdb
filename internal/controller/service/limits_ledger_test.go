package service

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestCheckLedgerFreesBudgetAfterTheWrite: budget a Service frees (its load
// balancer deleted) goes to the newer Services only once the write that
// frees it is done (commit); until then a newer Service reconciled meanwhile
// stays stretched, so the replica never runs both at once. An older Service
// that grows pushes the newer ones at once in the fit, and commit names
// their load balancers to write again.
func TestCheckLedgerFreesBudgetAfterTheWrite(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := func(name string, age int, rate float64) model.CheckDemand {
		return model.CheckDemand{Service: name, Created: t0.Add(time.Duration(age) * time.Minute), Rate: rate}
	}
	l := newCheckLedger(model.Limits{NodeCheckBudget: 20})
	for _, in := range []struct {
		key string
		d   model.CheckDemand
	}{{"A", d("a", 0, 10)}, {"B", d("b", 1, 8)}, {"C", d("c", 2, 12)}} {
		l.set(in.key, []model.CheckDemand{in.d})
		if again := l.commit(in.key); len(again) != 0 {
			t.Fatalf("adding %s made %v write again; a new Service never makes an older one yield", in.key, again)
		}
	}
	check := func(step, key string, ds []model.CheckDemand, want map[string]int) {
		t.Helper()
		got, _ := l.set(key, ds)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: factors %v, want %v", step, got, want)
		}
	}
	check("c as asked", "C", []model.CheckDemand{d("c", 2, 12)}, map[string]int{"c": 8})
	if again := l.commit("C"); len(again) != 0 {
		t.Errorf("nothing changed, yet %v to write again", again)
	}

	// A's Service is deleted; before its write is done, C is reconciled.
	check("a deleted, not written yet", "A", nil, map[string]int{})
	check("c while a's write is pending", "C", []model.CheckDemand{d("c", 2, 12)}, map[string]int{"c": 8})
	if again := l.commit("C"); len(again) != 0 {
		t.Errorf("c's reconcile, a pending: %v to write again", again)
	}
	if again := l.commit("A"); fmt.Sprint(again) != "[C]" {
		t.Errorf("after a's write: %v to write again, want [C]", again)
	}
	check("c after a's write", "C", []model.CheckDemand{d("c", 2, 12)}, map[string]int{"c": 1})
	if again := l.commit("C"); len(again) != 0 {
		t.Errorf("%v to write again", again)
	}

	// b (older than c) grows: c is pushed in the fit at once, and written
	// again once b's write is done.
	check("b grows", "B", []model.CheckDemand{d("b", 1, 16)}, map[string]int{"b": 1})
	if again := l.commit("B"); fmt.Sprint(again) != "[C]" {
		t.Errorf("after b's write: %v to write again, want [C]", again)
	}
	check("c after b grew", "C", []model.CheckDemand{d("c", 2, 12)}, map[string]int{"c": 4})
}

// TestCheckLedgerKeepsItsCounts: commit names exactly the load balancers
// with a Service written with another factor than the fit's now, and
// stretched counts the stretched Services, as a walk of every Service
// finds them, over random sequences of reconciles (set), writes (commit)
// and deletions — the ledger keeps both as it goes instead of walking.
func TestCheckLedgerKeepsItsCounts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	l := newCheckLedger(model.Limits{NodeCheckBudget: 40, MaxServiceCheckRate: 12})
	keys := []string{"A", "B", "C", "D", "E"}
	walk := func() ([]string, int) {
		again := map[string]bool{}
		for svc, f := range l.applied {
			if k := l.keyOf[svc]; k != "" && max(l.factors[svc], 1) != f {
				again[k] = true
			}
		}
		n := 0
		for _, f := range l.factors {
			if f > 1 {
				n++
			}
		}
		return slices.Sorted(maps.Keys(again)), n
	}
	binding, unbound := false, false
	for step := range 3000 {
		key := keys[rng.IntN(len(keys))]
		if rng.IntN(3) == 0 {
			_, pending := l.pending[key]
			got := l.commit(key)
			var want []string
			if pending { // else commit has nothing to do
				want, _ = walk()
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: commit(%s) named %v, a walk finds %v", step, key, got, want)
			}
			continue
		}
		var ds []model.CheckDemand
		if rng.IntN(6) > 0 { // else the load balancer's Services are deleted
			for i := range 1 + rng.IntN(3) {
				svc := fmt.Sprintf("%s%d", key, i)
				ds = append(ds, model.CheckDemand{Service: svc, Created: t0.Add(time.Duration(len(key)+i) * time.Minute), Rate: float64(1 + rng.IntN(20))})
			}
		}
		_, n := l.set(key, ds)
		if _, want := walk(); n != want {
			t.Fatalf("step %d: set(%s) counted %d stretched, a walk finds %d", step, key, n, want)
		}
		// The factors are FitChecks' over every demand, whether the
		// budget binds or not (refit finds them without it where not).
		all := slices.Collect(maps.Values(l.demands))
		if want := model.FitChecks(all, l.limits.MaxServiceCheckRate, l.limits.NodeCheckBudget); !maps.Equal(l.factors, want) {
			t.Fatalf("step %d: factors %v, FitChecks gives %v", step, l.factors, want)
		}
		sum := 0.0
		for _, d := range all {
			_, r := model.OwnCheckFactor(d.Rate, l.limits.MaxServiceCheckRate)
			sum += r
		}
		if sum >= l.limits.NodeCheckBudget {
			binding = true
		} else {
			unbound = true
		}
	}
	if !binding || !unbound {
		t.Fatalf("the budget bound: %v, did not bind: %v; the sequence must take both of refit's paths", binding, unbound)
	}
}
