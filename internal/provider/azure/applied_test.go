package azure_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestBackendsWaitForTheWriteToApply: while a write's operation runs, ARM
// already returns the new document (provisioningState Updating); the gates
// read the load balancer as last applied until the operation has ended. A
// standby that reads during the write still sees the drained address
// active — its termination gate must not open before ARM says the drain is
// applied — and sees it draining once it is.
func TestBackendsWaitForTheWriteToApply(t *testing.T) {
	const latency = 600 * time.Millisecond
	emu := azurearm.New(azurearm.Options{WriteLatency: latency})
	leader := newProvider(t, emu, provider.Hooks{})
	lb := func(second model.BackendState) *model.LoadBalancer {
		bs := backends(8080, "10.0.0.1", "10.0.0.2")
		bs[1].State = second
		if second == model.Draining {
			bs[1].Weight = 0
		}
		return &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, bs...)}}
	}
	converge(t, leader, lb(model.Active))
	standby, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	stateOf := func() model.BackendState {
		statuses, err := standby.Backends(context.Background(), "lb-a")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			if s.Address == "10.0.0.2" {
				return s.State
			}
		}
		t.Fatal("10.0.0.2 not among the backends")
		return ""
	}
	if s := stateOf(); s != model.Active {
		t.Fatalf("before the drain: %s, want active", s)
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		converge(t, leader, lb(model.Draining))
	}()
	// Once ARM holds the drain, and while its operation still runs.
	for stored := false; !stored; time.Sleep(5 * time.Millisecond) {
		doc, _ := emu.LoadBalancer(group, "lb-a")
		for _, p := range doc.Properties.BackendAddressPools {
			for _, a := range p.Properties.LoadBalancerBackendAddresses {
				stored = stored || ptr.Deref(a.Properties.IPAddress, "") == "10.0.0.2" && a.Properties.AdminState != nil && string(*a.Properties.AdminState) == "Down"
			}
		}
	}
	if s := stateOf(); time.Since(start) < latency && s != model.Active {
		t.Errorf("while the drain's operation runs: %s, want active (not applied yet)", s)
	}
	<-done
	if s := stateOf(); s != model.Draining {
		t.Errorf("once the drain's operation ended: %s, want draining", s)
	}
}
