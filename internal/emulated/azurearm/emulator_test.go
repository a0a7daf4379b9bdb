package azurearm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

const (
	sub    = "sub-1"
	rg     = "rg-1"
	subnet = "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
	lbID   = "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Network/loadBalancers/lb"
)

type clients struct {
	lbs   *armnetwork.LoadBalancersClient
	pools *armnetwork.LoadBalancerBackendAddressPoolsClient
}

func newClients(t *testing.T, emu *azurearm.Emulator) clients {
	t.Helper()
	opts := emu.ClientOptions()
	opts.Retry.StatusCodes = []int{http.StatusInternalServerError}
	f, err := armnetwork.NewClientFactory(sub, emu.Credential(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return clients{lbs: f.NewLoadBalancersClient(), pools: f.NewLoadBalancerBackendAddressPoolsClient()}
}

// newRemoteClients are newClients' clients sent over HTTP to the emulator's
// Handler (azurearm.Remote), as a controller in another process uses it.
func newRemoteClients(t *testing.T, emu *azurearm.Emulator) clients {
	t.Helper()
	srv := httptest.NewUnstartedServer(emu.Handler())
	tlsCfg, caPEM, err := azurearm.NewTLS()
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = tlsCfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cred, opts, err := azurearm.Remote(srv.URL, caPEM, "test")
	if err != nil {
		t.Fatal(err)
	}
	opts.Retry.StatusCodes = []int{http.StatusInternalServerError}
	f, err := armnetwork.NewClientFactory(sub, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	return clients{lbs: f.NewLoadBalancersClient(), pools: f.NewLoadBalancerBackendAddressPoolsClient()}
}

func simpleLB(tags map[string]*string) armnetwork.LoadBalancer {
	return armnetwork.LoadBalancer{Location: to.Ptr("westeurope"), Tags: tags, Properties: &armnetwork.LoadBalancerPropertiesFormat{
		FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"),
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}}}},
		BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr("pool")}},
		Probes: []*armnetwork.Probe{{Name: to.Ptr("probe"), Properties: &armnetwork.ProbePropertiesFormat{
			Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](8080), IntervalInSeconds: to.Ptr[int32](5)}}},
		LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("rule"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](80), BackendPort: to.Ptr[int32](8080),
			FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/fe")},
			BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(lbID + "/backendAddressPools/pool")},
			Probe:                   &armnetwork.SubResource{ID: to.Ptr(lbID + "/probes/probe")}}}},
	}}
}

func put(ctx context.Context, c clients, lb armnetwork.LoadBalancer, header http.Header) (armnetwork.LoadBalancer, error) {
	poller, err := c.lbs.BeginCreateOrUpdate(runtime.WithHTTPHeader(ctx, header), rg, "lb", lb, nil)
	if err != nil {
		return armnetwork.LoadBalancer{}, err
	}
	resp, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
	return resp.LoadBalancer, err
}

func putPool(ctx context.Context, c clients, ip string, header http.Header) (armnetwork.BackendAddressPool, error) {
	pool := armnetwork.BackendAddressPool{Properties: &armnetwork.BackendAddressPoolPropertiesFormat{
		LoadBalancerBackendAddresses: []*armnetwork.LoadBalancerBackendAddress{{Name: to.Ptr("a"),
			Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr(ip),
				VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr("/vnet")}}}}}}
	poller, err := c.pools.BeginCreateOrUpdate(runtime.WithHTTPHeader(ctx, header), rg, "lb", "pool", pool, nil)
	if err != nil {
		return armnetwork.BackendAddressPool{}, err
	}
	resp, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Millisecond})
	return resp.BackendAddressPool, err
}

func status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// TestETags: every write makes a new ETag, shared by the load balancer and
// its children; If-Match and If-None-Match are enforced with real 412s. The
// same in process and over HTTP (Handler, Remote): long-running operations
// polled, headers and error codes carried.
func TestETags(t *testing.T) {
	for name, newC := range map[string]func(*testing.T, *azurearm.Emulator) clients{
		"in-process": newClients, "over-http": newRemoteClients,
	} {
		t.Run(name, func(t *testing.T) { testETags(t, newC) })
	}
}

func testETags(t *testing.T, newC func(*testing.T, *azurearm.Emulator) clients) {
	emu := azurearm.New(azurearm.Options{PollSteps: 2})
	c := newC(t, emu)
	ctx := context.Background()
	created, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}}); status(err) != http.StatusPreconditionFailed {
		t.Fatalf("create over an existing one: %v, want 412", err)
	}
	got, err := c.lbs.Get(ctx, rg, "lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	etag := *got.Etag
	if etag != *created.Etag || *got.Properties.BackendAddressPools[0].Etag != etag {
		t.Fatalf("etags: created %s, get %s, pool %s", *created.Etag, etag, *got.Properties.BackendAddressPools[0].Etag)
	}
	if ip := got.Properties.FrontendIPConfigurations[0].Properties.PrivateIPAddress; ip == nil || *ip != "127.240.0.1" {
		t.Errorf("frontend address = %v, want 127.240.0.1 assigned", ip)
	}
	pool, err := putPool(ctx, c, "10.0.0.1", http.Header{"If-Match": {etag}})
	if err != nil {
		t.Fatal(err)
	}
	if *pool.Etag == etag {
		t.Fatal("a pool write kept the ETag")
	}
	_, err = putPool(ctx, c, "10.0.0.2", http.Header{"If-Match": {etag}})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed || re.ErrorCode != "PreconditionFailed" {
		t.Fatalf("stale If-Match: %v, want 412 PreconditionFailed", err)
	}
	if _, err := put(ctx, c, simpleLB(nil), http.Header{"If-Match": {etag}}); status(err) != http.StatusPreconditionFailed {
		t.Fatalf("stale If-Match on the load balancer: %v, want 412", err)
	}
	now, _ := emu.LoadBalancer(rg, "lb")
	if *now.Etag != *pool.Etag || *now.Properties.BackendAddressPools[0].Properties.LoadBalancerBackendAddresses[0].Properties.IPAddress != "10.0.0.1" {
		t.Error("a refused write changed state")
	}
	cnt := emu.Counters()
	if cnt.Writes != 2 || cnt.PreconditionFailed != 3 || cnt.Polls != 4 || cnt.LBPuts != 3 || cnt.PoolPuts != 2 {
		t.Errorf("counters = %+v", cnt)
	}
}

// TestValidation: what ARM refuses, the emulator refuses.
func TestValidation(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	c := newClients(t, emu)
	ctx := context.Background()
	for name, mutate := range map[string]func(*armnetwork.LoadBalancer){
		"slash in a tag name": func(lb *armnetwork.LoadBalancer) { lb.Tags = map[string]*string{"zerodrop.dev/owner": to.Ptr("x")} },
		"probe interval 2s": func(lb *armnetwork.LoadBalancer) {
			lb.Properties.Probes[0].Properties.IntervalInSeconds = to.Ptr[int32](2)
		},
		"missing pool":         func(lb *armnetwork.LoadBalancer) { lb.Properties.BackendAddressPools = nil },
		"name with a slash":    func(lb *armnetwork.LoadBalancer) { lb.Properties.Probes[0].Name = to.Ptr("a/b") },
		"frontend without net": func(lb *armnetwork.LoadBalancer) { lb.Properties.FrontendIPConfigurations[0].Properties.Subnet = nil },
		"duplicate frontend port": func(lb *armnetwork.LoadBalancer) {
			r := *lb.Properties.LoadBalancingRules[0]
			r.Name = to.Ptr("rule2")
			lb.Properties.LoadBalancingRules = append(lb.Properties.LoadBalancingRules, &r)
		},
	} {
		lb := simpleLB(nil)
		mutate(&lb)
		if _, err := put(ctx, c, lb, nil); status(err) != http.StatusBadRequest {
			t.Errorf("%s: %v, want 400", name, err)
		}
	}
	if _, ok := emu.LoadBalancer(rg, "lb"); ok {
		t.Error("an invalid load balancer was stored")
	}
}

// TestFaults: injected faults are real HTTP answers (429 with Retry-After,
// 500) and the same seed gives the same faults.
func TestFaults(t *testing.T) {
	run := func(seed uint64) azurearm.Counters {
		emu := azurearm.New(azurearm.Options{Seed: seed, Faults: azurearm.Faults{Rate: 0.5, Throttle: 1, ServerError: 1, Slow: 1, SlowDelay: time.Millisecond}})
		c := newClients(t, emu)
		for i := 0; i < 40; i++ {
			_, err := c.lbs.Get(context.Background(), rg, "lb", nil)
			var re *azcore.ResponseError
			if errors.As(err, &re) && re.StatusCode == http.StatusTooManyRequests && re.RawResponse.Header.Get("Retry-After") != "1" {
				t.Fatalf("429 without Retry-After: %v", re.RawResponse.Header)
			}
		}
		return emu.Counters()
	}
	a, b := run(7), run(7)
	if a != b || a.Throttled == 0 || a.ServerErrors == 0 || a.Slow == 0 {
		t.Fatalf("runs differ or a fault kind never happened: %+v vs %+v", a, b)
	}
	if a.Gets <= 40 {
		t.Errorf("500s were not retried by the SDK: %d GETs", a.Gets)
	}
}

// TestSupersededOperation: a write to a load balancer while an earlier
// write's operation is in progress supersedes it, as ARM's network provider
// does: the earlier operation ends Canceled with
// CanceledAndSupersededDueToAnotherOperation, the later one succeeds, and
// the later document is what is stored.
func TestSupersededOperation(t *testing.T) {
	emu := azurearm.New(azurearm.Options{PollSteps: 3})
	c := newClients(t, emu)
	ctx := context.Background()
	if _, err := put(ctx, c, simpleLB(nil), nil); err != nil {
		t.Fatal(err)
	}
	begin := func(ip string) *runtime.Poller[armnetwork.LoadBalancerBackendAddressPoolsClientCreateOrUpdateResponse] {
		pool := armnetwork.BackendAddressPool{Properties: &armnetwork.BackendAddressPoolPropertiesFormat{
			LoadBalancerBackendAddresses: []*armnetwork.LoadBalancerBackendAddress{{Name: to.Ptr("a"),
				Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr(ip),
					VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr("/vnet")}}}}}}
		p, err := c.pools.BeginCreateOrUpdate(ctx, rg, "lb", "pool", pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first, second := begin("10.0.0.1"), begin("10.0.0.2")
	opts := &runtime.PollUntilDoneOptions{Frequency: time.Millisecond}
	_, err := first.PollUntilDone(ctx, opts)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != "CanceledAndSupersededDueToAnotherOperation" {
		t.Fatalf("superseded operation: %v, want CanceledAndSupersededDueToAnotherOperation", err)
	}
	resp, err := second.PollUntilDone(ctx, opts)
	if err != nil {
		t.Fatalf("superseding operation: %v", err)
	}
	if ip := *resp.Properties.LoadBalancerBackendAddresses[0].Properties.IPAddress; ip != "10.0.0.2" {
		t.Errorf("stored address %s, want the later write's 10.0.0.2", ip)
	}
	// The record names the superseded operation once, with its writer, so
	// that the lab can count each writer's.
	calls, _ := emu.Calls(0)
	var ends []azurearm.Call
	for _, call := range calls {
		if call.Superseded() {
			ends = append(ends, call)
		}
	}
	if len(ends) != 1 || ends[0].Client == "" || ends[0].Resource == "" {
		t.Errorf("superseded operations recorded: %v, want one with its writer and resource", ends)
	}
}

// TestOnWrite: the hook runs once per write that changed state, with the
// change already visible, and never for a read or a refused write.
func TestOnWrite(t *testing.T) {
	emu := azurearm.New(azurearm.Options{PollSteps: 2})
	c := newClients(t, emu)
	ctx := context.Background()
	var seen []string
	emu.OnWrite(func() {
		lb, ok := emu.LoadBalancer(rg, "lb")
		if !ok {
			seen = append(seen, "none")
			return
		}
		seen = append(seen, *lb.Etag)
	})
	created, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.lbs.Get(ctx, rg, "lb", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}}); status(err) != http.StatusPreconditionFailed {
		t.Fatalf("create over an existing one: %v, want 412", err)
	}
	pool, err := putPool(ctx, c, "10.0.0.1", http.Header{"If-Match": {*created.Etag}})
	if err != nil {
		t.Fatal(err)
	}
	emu.OnWrite(nil)
	if _, err := putPool(ctx, c, "10.0.0.2", http.Header{"If-Match": {*pool.Etag}}); err != nil {
		t.Fatal(err)
	}
	if want := []string{*created.Etag, *pool.Etag}; !slices.Equal(seen, want) {
		t.Fatalf("hook saw ETags %v, want %v (one per write, after it)", seen, want)
	}
}

// TestPrivateLinkServicesListed: the resource group's private link
// services list (none are modelled) answers an empty list, not the 404 of
// an unknown API: cloud-provider-azure lists them when a Service moves to
// another load balancer, and fails the move on an error.
func TestPrivateLinkServicesListed(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	f, err := armnetwork.NewClientFactory(sub, emu.Credential(), emu.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	pager := f.NewPrivateLinkServicesClient().NewListPager(rg, nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatalf("list private link services: %v", err)
		}
		n += len(page.Value)
	}
	if n != 0 {
		t.Errorf("%d private link services listed, want none", n)
	}
}
