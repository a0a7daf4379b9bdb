package azure_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestEveryReadWithinTheBudget: every GET the provider causes reaches ARM
// within Options.ReadQPS and ReadBurst (--azure-read-qps, --azure-read-burst)
// — not only its own reads (start-up, Observe, the gates' Backends), but
// the SDK's too: each poll of a write's long-running operation and its
// final GET, a rule-health read's polls and result. The emulator records
// every GET it answered, polls included (RecordPolls), with operations
// that take many polls; the check is the token bucket's own bound, which
// no scheduling delay can break: by any moment t since before the
// provider's start, at most burst + qps·t reads can have been answered.
// Without the SDK pipeline's budget (budget.go) the polls alone go out a
// hundred a second (the emulator's Retry-After is 10 ms) and the test
// fails.
func TestEveryReadWithinTheBudget(t *testing.T) {
	const (
		qps   = 20.0
		burst = 2
		polls = 20 // in-progress answers of each operation
	)
	emu := azurearm.New(azurearm.Options{PollSteps: polls + 1, RecordPolls: true})
	pr := &probes{up: map[string]bool{"10.0.0.1": true, "10.0.0.2": true}}
	emu.SetRuleHealth(pr.health)
	start := time.Now()
	p := newProviderWith(t, emu, provider.Hooks{}, func(o *azure.Options) {
		o.ReadQPS, o.ReadBurst = qps, burst
		o.BackendsMaxAge = time.Millisecond
		// One rule-health read: its polls count like a write's.
		o.RuleHealth, o.HealthMaxAge, o.HealthQPS, o.HealthBurst = true, time.Hour, 100, 100
	})
	desired := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "web", 80, backends(8080, "10.0.0.1", "10.0.0.2")...)}}
	converge(t, p, desired) // a PUT: its operation's polls and final GET
	ctx := context.Background()
	for range 5 { // the gates, each reading again (BackendsMaxAge 1 ms)
		time.Sleep(2 * time.Millisecond)
		if _, err := p.Backends(ctx, "lb-a"); err != nil {
			t.Fatal(err)
		}
	}
	// The gates' first Backends started the rule-health read; wait for its
	// result to be read.
	deadline := time.Now().Add(time.Minute)
	for !answered(emu, "operationResult") {
		if time.Now().After(deadline) {
			t.Fatal("no rule-health result read within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}

	calls, _ := emu.Calls(0)
	var reads []azurearm.Call
	kinds := map[string]int{}
	for _, c := range calls {
		if c.Method == http.MethodGet {
			reads = append(reads, c)
			kinds[c.Kind]++
		}
	}
	// What the test must have exercised: the write's polls (and the
	// rule-health read's), the result, the load balancer's GETs.
	if kinds["operation"] < polls || kinds["operationResult"] < polls || kinds["loadBalancer"] < 5 {
		t.Fatalf("reads by kind %v: want at least %d polls of the write's operation and of the rule-health read's, and 5 load balancer GETs", kinds, polls)
	}
	slices.SortStableFunc(reads, func(x, y azurearm.Call) int { return x.Time.Compare(y.Time) })
	for i, c := range reads {
		elapsed := c.Time.Sub(start).Seconds()
		if allowed := float64(burst) + qps*elapsed; float64(i+1) > allowed {
			t.Fatalf("%d reads answered %.3f s after the start (%s %s), more than the budget's %.1f (burst %d + %g a second); reads by kind: %v",
				i+1, elapsed, c.Kind, c.Resource, allowed, burst, qps, kinds)
		}
	}
	span := reads[len(reads)-1].Time.Sub(start).Seconds()
	t.Logf("%d reads in %.2f s (%.1f a second, budget %g, burst %d; peak %d in any second): %v",
		len(reads), span, float64(len(reads))/span, qps, burst, peakPerSecond(reads), kinds)
}

// TestRetriesChargeTheBudget: a read the SDK retries (a 500) takes a
// token for each try. With a budget of three reads and next to no refill,
// the start-up read takes one and a read that fails four times (three
// retries) takes the other two and two more: the next read, whose token
// would come minutes later, is refused at once for its caller's deadline
// (ErrReadBudget), not sent. Without the retries' charge it is sent.
func TestRetriesChargeTheBudget(t *testing.T) {
	emu := azurearm.New(azurearm.Options{RecordPolls: true})
	p := newProviderWith(t, emu, provider.Hooks{}, func(o *azure.Options) {
		o.ReadQPS, o.ReadBurst = 0.01, 3
	})
	ctx := context.Background()
	emu.SetFaults(azurearm.Faults{Rate: 1, ServerError: 1})
	_, since := emu.Calls(0)
	if _, err := p.Observe(ctx, "lb-a"); err == nil {
		t.Fatal("Observe succeeded through injected 500s")
	}
	calls, _ := emu.Calls(since)
	if len(calls) != 4 {
		t.Fatalf("%d tries of the failing read, want 4 (the SDK's three retries): %v", len(calls), calls)
	}
	emu.SetFaults(azurearm.Faults{})
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := p.Observe(tctx, "lb-a")
	if !errors.Is(err, azure.ErrReadBudget) {
		t.Fatalf("the read after the retries: %v, want ErrReadBudget", err)
	}
	if calls, _ := emu.Calls(since); len(calls) != 4 {
		t.Fatalf("the refused read reached ARM: %v", calls[4:])
	}
}

// answered reports whether the emulator answered a call of kind 200.
func answered(emu *azurearm.Emulator, kind string) bool {
	calls, _ := emu.Calls(0)
	return slices.ContainsFunc(calls, func(c azurearm.Call) bool { return c.Kind == kind && c.Status == http.StatusOK })
}

// peakPerSecond is the most calls in any second (calls sorted by time).
func peakPerSecond(calls []azurearm.Call) int {
	peak, j := 0, 0
	for i := range calls {
		for calls[i].Time.Sub(calls[j].Time) >= time.Second {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak
}
