package azure_test

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// ccmLB is a load balancer as cloud-provider-azure writes one for internal
// Services in nodeIP mode: one frontend per Service (named "a<uid>"), a
// pool of node addresses, an HTTP probe on the health-check node port and
// floating-IP rules "a<uid>-TCP-<port>". The rules' names are swapped here
// on purpose: a reader that went by name would pick the other Service's.
func ccmLB(name string, nodes ...string) armnetwork.LoadBalancer {
	id := "/subscriptions/" + subID + "/resourceGroups/" + group + "/providers/Microsoft.Network/loadBalancers/" + name
	ref := func(kind, child string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to.Ptr(id + "/" + kind + "/" + child)}
	}
	vnet := subnet[:len(subnet)-len("/subnets/lb-frontends")]
	pool := &armnetwork.BackendAddressPool{Name: to.Ptr("kubernetes"), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{
		VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(vnet)}}}
	for _, n := range nodes {
		pool.Properties.LoadBalancerBackendAddresses = append(pool.Properties.LoadBalancerBackendAddresses,
			&armnetwork.LoadBalancerBackendAddress{Name: to.Ptr("node-" + n), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{
				IPAddress: to.Ptr(n)}})
	}
	fe := func(name, addr string) *armnetwork.FrontendIPConfiguration {
		return &armnetwork.FrontendIPConfiguration{Name: to.Ptr(name), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{
			Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}, PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic),
			PrivateIPAddress: to.Ptr(addr)}}
	}
	probe := func(name string, port int32) *armnetwork.Probe {
		return &armnetwork.Probe{Name: to.Ptr(name), Properties: &armnetwork.ProbePropertiesFormat{
			Protocol: to.Ptr(armnetwork.ProbeProtocolHTTP), Port: to.Ptr(port), RequestPath: to.Ptr("/healthz"),
			IntervalInSeconds: to.Ptr[int32](5), ProbeThreshold: to.Ptr[int32](2)}}
	}
	rule := func(name, frontend, probe string, port int32) *armnetwork.LoadBalancingRule {
		return &armnetwork.LoadBalancingRule{Name: to.Ptr(name), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(port), BackendPort: to.Ptr(port),
			EnableFloatingIP: to.Ptr(true), IdleTimeoutInMinutes: to.Ptr[int32](4), EnableTCPReset: to.Ptr(true),
			FrontendIPConfiguration: ref("frontendIPConfigurations", frontend), BackendAddressPool: ref("backendAddressPools", "kubernetes"),
			Probe: ref("probes", probe)}}
	}
	return armnetwork.LoadBalancer{Name: to.Ptr(name), Location: to.Ptr("westeurope"),
		SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{fe("aaaaa", "127.240.0.10"), fe("abbbb", "127.240.0.11")},
			BackendAddressPools:      []*armnetwork.BackendAddressPool{pool},
			Probes:                   []*armnetwork.Probe{probe("aaaaa-TCP-80", 30100), probe("abbbb-TCP-80", 30200)},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{
				rule("abbbb-TCP-80", "aaaaa", "aaaaa-TCP-80", 80), // the name of the other Service's rule
				rule("aaaaa-TCP-80", "abbbb", "abbbb-TCP-80", 80),
			}}}
}

// gateOnlyProvider is a provider of its own load balancer lb-a that may
// read kubernetes-internal for gate-only Services, with rule health.
func gateOnlyProvider(t *testing.T, emu *azurearm.Emulator) *azure.Provider {
	t.Helper()
	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
		RuleHealth: true, HealthMaxAge: 50 * time.Millisecond, HealthQPS: 100, HealthBurst: 100,
		GateOnlyLoadBalancers: []string{"kubernetes-internal"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForeignRuleByFrontend: the rule of a load balancer another controller
// writes is found by its frontend's address, port and protocol — not by its
// name — with its pool's node addresses, its probe, its floating IP and a
// settle of two probe intervals; an address's rule health is Up, Down
// (listed, with when it was read), or not known to be either before rule
// health's first answer; and reading it writes nothing.
func TestForeignRuleByFrontend(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	if err := emu.Seed(subID, group, ccmLB("kubernetes-internal", "10.0.1.4", "10.0.1.5")); err != nil {
		t.Fatal(err)
	}
	pr := &probes{up: map[string]bool{"10.0.1.4": true, "10.0.1.5": false}, hold: make(chan struct{})}
	emu.SetRuleHealth(pr.health)
	p := gateOnlyProvider(t, emu)
	ctx := context.Background()
	released := false
	release := func() {
		if !released {
			released = true
			close(pr.hold)
		}
	}
	defer release()

	r, err := p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP)
	if err != nil || r == nil {
		t.Fatalf("rule of 127.240.0.10:80: %v, %v", r, err)
	}
	if r.LB != "kubernetes-internal" || r.Rule != "abbbb-TCP-80" || !r.FloatingIP || r.Settle != 10*time.Second ||
		r.Probe.Kind != model.ProbeHTTP || r.Probe.Port != 30100 || r.Probe.Path != "/healthz" || r.Probe.Fall != 2 {
		t.Errorf("rule of 127.240.0.10:80 = %+v, want abbbb-TCP-80 (the rule whose frontend has the address), floating IP, HTTP probe on 30100, settle 5s", r)
	}
	var got []string
	for _, b := range r.Backends {
		got = append(got, b.Address)
		if b.State != model.Active || b.Listener != "kubernetes-internal/abbbb-TCP-80" {
			t.Errorf("backend %+v: want active on kubernetes-internal/abbbb-TCP-80", b)
		}
	}
	sort.Strings(got)
	if len(got) != 2 || got[0] != "10.0.1.4" || got[1] != "10.0.1.5" {
		t.Errorf("pool addresses %v, want the two nodes", got)
	}
	for _, miss := range []struct {
		addr  string
		port  int32
		proto model.Protocol
	}{{"127.240.0.10", 81, model.TCP}, {"127.240.0.10", 80, model.UDP}, {"127.240.0.12", 80, model.TCP}} {
		if r, err := p.ForeignRule(ctx, miss.addr, miss.port, miss.proto); err != nil || r != nil {
			t.Errorf("%s:%d/%s: %+v, %v, want no rule", miss.addr, miss.port, miss.proto, r, err)
		}
	}

	health := func(addr string) provider.BackendStatus {
		r, err := p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP)
		if err != nil || r == nil {
			t.Fatalf("rule: %v, %v", r, err)
		}
		for _, b := range r.Backends {
			if b.Address == addr {
				return b
			}
		}
		t.Fatalf("%s not in the pool", addr)
		return provider.BackendStatus{}
	}
	if before := health("10.0.1.4"); !before.HealthKnown || before.Healthy || before.Probed {
		t.Errorf("10.0.1.4 before rule health's first answer: %+v, want known not healthy (not yet probed Up), not listed", before)
	}
	release()
	eventually(t, "rule health answered", func() bool { return health("10.0.1.4").Probed })
	if up := health("10.0.1.4"); !up.Healthy || !up.Probed || up.ProbedAt.IsZero() || !up.Lags || up.UpAt != up.ProbedAt {
		t.Errorf("10.0.1.4 probed Up: %+v", up)
	}
	if down := health("10.0.1.5"); down.Healthy || !down.Probed || down.ProbedAt.IsZero() || !down.UpAt.IsZero() {
		t.Errorf("10.0.1.5 probed Down: %+v, want listed and not healthy, never read Up", down)
	}
	calls, _ := emu.Calls(0)
	for _, c := range calls {
		if c.Write() || (c.Method != http.MethodGet && c.Method != http.MethodPost) {
			t.Errorf("a gate-only read made %s", c)
		}
	}
}
