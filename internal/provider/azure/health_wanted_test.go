package azure_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestRuleHealthBudgetGoesToWantedRules: on a load balancer with many
// rules, a caller that names the listeners it waits for
// (provider.WithWantedListeners, as a readiness gate does) gets their rule
// read with the health budget, whatever the order of the other rules: with
// a budget of one read, the one read goes to the wanted rule, the last of
// twelve, and no other rule is asked. Before the hint the budget went to
// the first rules listed, and a gate on a load balancer with more rules
// than the budget reads in HealthMaxAge waited for ever (seen on emulated
// Azure with 30 other Services).
func TestRuleHealthBudgetGoesToWantedRules(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	var mu sync.Mutex
	asked := map[string]int{}
	emu.SetRuleHealth(func(_, _, rule string) ([]azurearm.BackendHealth, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[rule]++
		return []azurearm.BackendHealth{{IPAddress: "10.0.0.1", State: "Up"}}, nil
	})
	writer := newProvider(t, emu, provider.Hooks{})
	lb := &model.LoadBalancer{Key: "lb-a"}
	for i := range 11 {
		lb.Listeners = append(lb.Listeners, listener("default", fmt.Sprintf("svc-%02d", i), 80, backends(8080, "10.0.0.1")...))
	}
	lb.Listeners = append(lb.Listeners, listener("default", "web", 80, backends(8080, "10.0.0.1")...))
	web := lb.Listeners[len(lb.Listeners)-1].Name
	converge(t, writer, lb)

	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
		RuleHealth: true, HealthMaxAge: time.Hour, HealthQPS: 0.001, HealthBurst: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := provider.WithWantedListeners(context.Background(), []string{web})
	webHealthy := func() bool {
		statuses, err := p.Backends(ctx, "lb-a")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			if s.Listener == web {
				return s.HealthKnown && s.Healthy
			}
		}
		t.Fatalf("%s not among the backends %+v", web, statuses)
		return false
	}
	eventually(t, "the wanted rule's backend probed Up", webHealthy)
	mu.Lock()
	defer mu.Unlock()
	for rule, n := range asked {
		if !strings.Contains(rule, ".web.") {
			t.Errorf("rule %s was read %d times; want only the wanted rule read", rule, n)
		}
	}
}
