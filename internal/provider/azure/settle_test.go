package azure_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

func backendAddrs(t *testing.T, p *azure.Provider, key string) []string {
	t.Helper()
	bs, err := p.Backends(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range bs {
		out = append(out, b.Address+"="+string(b.State))
	}
	slices.Sort(out)
	return out
}

// TestStandbyBackendsFollowWrites: a standby replica never observes, yet its
// drain endpoint answers from Backends; it must see the leader's writes
// within BackendsMaxAge, and read ARM at most once per max age meanwhile.
func TestStandbyBackendsFollowWrites(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	leader := newProvider(t, emu, provider.Hooks{})
	lb := func(addrs ...string) *model.LoadBalancer {
		return &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, addrs...)...)}}
	}
	converge(t, leader, lb("10.0.0.1", "10.0.0.2"))
	const maxAge = 300 * time.Millisecond
	standby, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: maxAge,
	})
	if err != nil {
		t.Fatal(err)
	}
	converge(t, leader, lb("10.0.0.1", "10.0.0.3"))

	before := emu.Counters()
	deadline := time.Now().Add(maxAge + 2*time.Second)
	want := []string{"10.0.0.1=active", "10.0.0.3=active"}
	calls := 0
	for got := backendAddrs(t, standby, "lb-a"); !slices.Equal(got, want); got = backendAddrs(t, standby, "lb-a") {
		calls++
		if time.Now().After(deadline) {
			t.Fatalf("the standby still reports %v, want %v (the leader's write)", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Polled every 10ms for up to maxAge: at most a read or two, not one
	// per call.
	if gets := emu.Counters().Sub(before).Gets; gets > 2 || calls > 5 && gets >= calls {
		t.Errorf("%d Backends calls made %d GETs, want at most 2", calls+1, gets)
	}
}

// TestRemovalSettle: the termination gate waits two of the rule's probe
// intervals as Azure runs them (at least 5s each), after the removal.
func TestRemovalSettle(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	slow := listener("default", "slow", 80, backends(8080, "10.0.0.1")...)
	slow.Probe.IntervalMillis = 12_500
	converge(t, p, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "web", 80, backends(8080, "10.0.0.2")...), slow,
	}})
	for _, tc := range []struct {
		listener string
		want     time.Duration
	}{
		{model.ListenerName("default", "web", "TCP", 80), 10 * time.Second},  // 2s asked, Azure runs 5s
		{model.ListenerName("default", "slow", "TCP", 80), 26 * time.Second}, // whole seconds, rounded up
		{model.ListenerName("default", "gone", "TCP", 80), 10 * time.Second}, // no rule: Azure's shortest
	} {
		if got := p.RemovalSettle("lb-a", tc.listener); got != tc.want {
			t.Errorf("RemovalSettle(%s) = %s, want %s", tc.listener, got, tc.want)
		}
	}
}
