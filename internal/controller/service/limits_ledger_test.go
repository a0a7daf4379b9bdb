package service

import (
	"fmt"
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
