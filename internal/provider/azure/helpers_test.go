package azure_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

const (
	subID  = "00000000-0000-0000-0000-00000000zd01"
	group  = "rg-zerodrop"
	subnet = "/subscriptions/" + subID + "/resourceGroups/" + group +
		"/providers/Microsoft.Network/virtualNetworks/vnet-cluster/subnets/lb-frontends"
)

// newProvider connects a provider to the emulator, with short polls.
func newProvider(t testing.TB, emu *azurearm.Emulator, hooks provider.Hooks, lbs ...string) *azure.Provider {
	t.Helper()
	return newProviderWith(t, emu, hooks, nil, lbs...)
}

// newProviderWith is newProvider with tune changing its options (nil: none).
func newProviderWith(t testing.TB, emu *azurearm.Emulator, hooks provider.Hooks, tune func(*azure.Options), lbs ...string) *azure.Provider {
	t.Helper()
	if len(lbs) == 0 {
		lbs = []string{"lb-a"}
	}
	opts := azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: lbs, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		Hooks: hooks, PollFrequency: 5 * time.Millisecond,
	}
	if tune != nil {
		tune(&opts)
	}
	p, err := azure.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fill gives desired listeners the addresses Azure assigned, as the
// controller does for providers that assign addresses.
func fill(desired, observed *model.LoadBalancer) *model.LoadBalancer {
	if desired == nil {
		return nil
	}
	out := model.Canonical(desired)
	for i := range out.Listeners {
		if o := observed.Listener(out.Listeners[i].Name); o != nil && out.Listeners[i].Address == "" {
			out.Listeners[i].Address = o.Address
		}
	}
	return out
}

// converge observes, diffs and applies until nothing is left to do; it
// returns the plans it applied.
func converge(t testing.TB, p *azure.Provider, desired *model.LoadBalancer) []model.Plan {
	t.Helper()
	ctx := context.Background()
	var plans []model.Plan
	for i := 0; i < 3; i++ {
		obs, err := p.Observe(ctx, desired.Key)
		if err != nil {
			t.Fatal(err)
		}
		plan := model.Diff(obs, fill(desired, obs))
		if plan.Empty() {
			return plans
		}
		if err := p.Apply(ctx, plan); err != nil {
			t.Fatalf("apply %s: %v", plan, err)
		}
		plans = append(plans, plan)
	}
	obs, _ := p.Observe(ctx, desired.Key)
	t.Fatalf("no convergence: still %s", model.Diff(obs, fill(desired, obs)))
	return nil
}

func listener(ns, name string, port int32, backends ...model.Backend) model.Listener {
	return model.Listener{
		Name: model.ListenerName(ns, name, "TCP", port), Port: port, Protocol: model.TCP,
		Probe:    model.Probe{Kind: model.ProbeTCP, IntervalMillis: 2000, Rise: model.DefaultRise, Fall: model.DefaultFall},
		Backends: backends,
	}
}

func backends(port int32, addrs ...string) []model.Backend {
	out := make([]model.Backend, len(addrs))
	for i, a := range addrs {
		out[i] = model.Backend{Address: a, Port: port, Weight: model.DefaultWeight, State: model.Active}
	}
	return out
}

func addrs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%d", prefix, i+1)
	}
	return out
}
