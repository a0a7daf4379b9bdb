package azurearm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// TestWriteLatency: with a write latency, a write's operation ends that
// long after it was accepted, not earlier, and until it ends a GET shows
// the new document Updating; then Succeeded.
func TestWriteLatency(t *testing.T) {
	const latency = 300 * time.Millisecond
	emu := azurearm.New(azurearm.Options{WriteLatency: latency})
	c := newClients(t, emu)
	ctx := context.Background()
	start := time.Now()
	poller, err := c.lbs.BeginCreateOrUpdate(ctx, rg, "lb", simpleLB(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.lbs.Get(ctx, rg, "lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A GET right after the PUT was accepted: on a slow machine it may come
	// after the latency, and then says nothing about Updating.
	if time.Since(start) < latency {
		if s := *got.Properties.ProvisioningState; s != armnetwork.ProvisioningStateUpdating {
			t.Errorf("GET while the operation runs: provisioningState %s, want Updating", s)
		}
		if len(got.Properties.LoadBalancingRules) != 1 {
			t.Errorf("GET while the operation runs: %d rules, want the new document's 1", len(got.Properties.LoadBalancingRules))
		}
	}
	if _, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < latency {
		t.Errorf("the operation ended after %s, before the write latency %s", took, latency)
	}
	got, err = c.lbs.Get(ctx, rg, "lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := *got.Properties.ProvisioningState; s != armnetwork.ProvisioningStateSucceeded {
		t.Errorf("GET once the operation ended: provisioningState %s, want Succeeded", s)
	}
}

// TestRuleHealth: the rule-health operation answers from the RuleHealth set
// when it ends (Up and Down counted, each address listed), refuses a rule
// that does not exist, and is refused — not answered with invented states —
// when nothing probes the backends.
func TestRuleHealth(t *testing.T) {
	emu := azurearm.New(azurearm.Options{PollSteps: 2})
	c := newClients(t, emu)
	ctx := context.Background()
	if _, err := put(ctx, c, simpleLB(nil), nil); err != nil {
		t.Fatal(err)
	}
	f, err := armnetwork.NewClientFactory(sub, emu.Credential(), emu.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	rules := f.NewLoadBalancerLoadBalancingRulesClient()
	health := func(rule string) (armnetwork.LoadBalancerHealthPerRule, error) {
		p, err := rules.BeginHealth(ctx, rg, "lb", rule, nil)
		if err != nil {
			return armnetwork.LoadBalancerHealthPerRule{}, err
		}
		res, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
		return res.LoadBalancerHealthPerRule, err
	}
	var re *azcore.ResponseError
	if _, err := health("rule"); !errors.As(err, &re) || re.ErrorCode != "RuleHealthNotModelled" {
		t.Errorf("rule health with no data plane: %v, want RuleHealthNotModelled", err)
	}
	var asked string
	emu.SetRuleHealth(func(group, lb, rule string) ([]azurearm.BackendHealth, error) {
		asked = group + "/" + lb + "/" + rule
		return []azurearm.BackendHealth{{IPAddress: "10.0.0.1", State: "Up", Reason: "probe up"},
			{IPAddress: "10.0.0.2", State: "Down", Reason: "probe down"}, {IPAddress: "10.0.0.3", State: "Up", Reason: "probe up"}}, nil
	})
	res, err := health("rule")
	if err != nil {
		t.Fatal(err)
	}
	if asked != rg+"/lb/rule" || *res.Up != 2 || *res.Down != 1 || len(res.LoadBalancerBackendAddresses) != 3 ||
		*res.LoadBalancerBackendAddresses[1].IPAddress != "10.0.0.2" || *res.LoadBalancerBackendAddresses[1].State != "Down" {
		t.Errorf("rule health asked for %q, answered up %v down %v %v", asked, *res.Up, *res.Down, res.LoadBalancerBackendAddresses)
	}
	if _, err := health("nope"); status(err) != 404 {
		t.Errorf("rule health of a missing rule: %v, want 404", err)
	}
}
