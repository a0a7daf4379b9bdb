package azure_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// The CCM's pool of kubernetes-internal (ccmLB), and its members' ipconfigs
// as the compute emulator names them.
const (
	ccmPoolID = "/subscriptions/" + subID + "/resourceGroups/" + group +
		"/providers/Microsoft.Network/loadBalancers/kubernetes-internal/backendAddressPools/kubernetes"
	nodeSubnet = "/subscriptions/" + subID + "/resourceGroups/" + group +
		"/providers/Microsoft.Network/virtualNetworks/vnet-cluster/subnets/nodes"
)

func vmssIPConfigID(set string, instance string) string {
	return "/subscriptions/" + subID + "/resourceGroups/" + group + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + set +
		"/virtualMachines/" + instance + "/networkInterfaces/" + set + "/ipConfigurations/ipconfig1"
}

func vmIPConfigID(vm string) string {
	return "/subscriptions/" + subID + "/resourceGroups/" + group + "/providers/Microsoft.Network/networkInterfaces/" +
		azurecompute.NICName(vm) + "/ipConfigurations/ipconfig1"
}

// ruleProbes answers rule health: each member Up, as ARM answers for the
// pool's kind — by address for a nodeIP pool, by ipconfig ID (and no
// address) for a NIC-based pool, so that a reader keyed by address alone
// finds nothing.
type ruleProbes struct {
	mu      sync.Mutex
	byAddr  []string
	byIPCfg []string
}

func (r *ruleProbes) health(_, _, _ string) ([]azurearm.BackendHealth, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []azurearm.BackendHealth
	for _, a := range r.byAddr {
		out = append(out, azurearm.BackendHealth{IPAddress: a, State: "Up"})
	}
	for _, id := range r.byIPCfg {
		out = append(out, azurearm.BackendHealth{IPConfigurationID: id, State: "Up"})
	}
	return out, nil
}

// reads counts the provider's reads by operation.
type reads struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *reads) hook(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[op]++
}

// lists is how many NIC lists were read.
func (r *reads) lists() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n["list-nics"] + r.n["list-vmss-vm-nics"]
}

func nicWorld(t *testing.T) (*azurearm.Emulator, *azurecompute.Compute) {
	t.Helper()
	emu := azurearm.New(azurearm.Options{})
	c := azurecompute.New(azurecompute.Options{})
	emu.AttachCompute(c)
	return emu, c
}

func gateOnlyProviderWith(t *testing.T, emu *azurearm.Emulator, rd *reads) *azure.Provider {
	t.Helper()
	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		Hooks: provider.Hooks{Read: rd.hook}, PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
		RuleHealth: true, HealthMaxAge: 50 * time.Millisecond, HealthQPS: 100, HealthBurst: 100,
		GateOnlyLoadBalancers: []string{"kubernetes-internal"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForeignRuleNICPools: a gate-only Service's rule reads the pool's
// members as node addresses whatever the CCM's pool type — nodeIP
// (addresses in the pool), a VMSS's NICs and availability-set VMs' NICs
// (nodeIPConfiguration: ipconfig IDs in the pool, resolved through the
// NIC lists) — with a node in the pool reported and one outside it not;
// rule health that names ipconfigs (no address) is read for the member's
// address; a second read of the rule reads no NIC list again (cached); and
// nothing is written.
func TestForeignRuleNICPools(t *testing.T) {
	const in, out = "10.0.1.4", "10.0.1.9"
	for _, tc := range []struct {
		name string
		// seed makes the cluster: the node at in a member of the pool,
		// the node at out not; it returns the members' ipconfig IDs (none
		// for a nodeIP pool).
		seed      func(t *testing.T, emu *azurearm.Emulator, c *azurecompute.Compute) []string
		wantLists bool
	}{
		{name: "nodeIP pool", seed: func(t *testing.T, emu *azurearm.Emulator, _ *azurecompute.Compute) []string {
			if err := emu.Seed(subID, group, ccmLB("kubernetes-internal", in)); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{name: "VMSS NIC pool", wantLists: true, seed: func(t *testing.T, emu *azurearm.Emulator, c *azurecompute.Compute) []string {
			if err := emu.Seed(subID, group, ccmLB("kubernetes-internal")); err != nil {
				t.Fatal(err)
			}
			for _, s := range []azurecompute.ScaleSet{
				{Name: "pool1-vmss", ComputerNamePrefix: "pool1-", Pools: []string{ccmPoolID},
					Instances: []azurecompute.Instance{{ID: 3, IP: netip.MustParseAddr(in)}}},
				{Name: "pool2-vmss", ComputerNamePrefix: "pool2-",
					Instances: []azurecompute.Instance{{ID: 0, IP: netip.MustParseAddr(out)}}},
			} {
				s.Subscription, s.ResourceGroup, s.SubnetID = subID, group, nodeSubnet
				if _, err := c.SeedVMSS(s); err != nil {
					t.Fatal(err)
				}
			}
			return []string{vmssIPConfigID("pool1-vmss", "3")}
		}},
		{name: "availability-set VM NIC pool", wantLists: true, seed: func(t *testing.T, emu *azurearm.Emulator, c *azurecompute.Compute) []string {
			if err := emu.Seed(subID, group, ccmLB("kubernetes-internal")); err != nil {
				t.Fatal(err)
			}
			for _, v := range []azurecompute.VM{
				{Name: "node-a", AvailabilitySet: "as-nodes", IP: netip.MustParseAddr(in), Pools: []string{ccmPoolID}},
				{Name: "node-b", AvailabilitySet: "as-nodes", IP: netip.MustParseAddr(out)},
			} {
				v.Subscription, v.ResourceGroup, v.SubnetID = subID, group, nodeSubnet
				if err := c.SeedVM(v); err != nil {
					t.Fatal(err)
				}
			}
			return []string{vmIPConfigID("node-a")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu, c := nicWorld(t)
			ids := tc.seed(t, emu, c)
			pr := &ruleProbes{byIPCfg: ids}
			if ids == nil {
				pr.byAddr = []string{in}
			}
			emu.SetRuleHealth(pr.health)
			rd := &reads{}
			p := gateOnlyProviderWith(t, emu, rd)
			ctx := context.Background()
			rule := func() map[string]provider.BackendStatus {
				t.Helper()
				r, err := p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP)
				if err != nil || r == nil {
					t.Fatalf("rule of 127.240.0.10:80: %v, %v", r, err)
				}
				got := map[string]provider.BackendStatus{}
				for _, b := range r.Backends {
					got[b.Address] = b
				}
				return got
			}
			got := rule()
			if b, ok := got[in]; !ok || b.State != model.Active || b.Port != 80 || b.Listener != "kubernetes-internal/abbbb-TCP-80" {
				t.Errorf("backends %v: want %s active on port 80 of kubernetes-internal/abbbb-TCP-80", got, in)
			}
			if _, ok := got[out]; ok || len(got) != 1 {
				t.Errorf("backends %v: want only %s (%s is not in the pool)", got, in, out)
			}
			if lists := rd.lists(); tc.wantLists != (lists > 0) {
				t.Errorf("%d NIC lists read; want some: %v", lists, tc.wantLists)
			}
			before := rd.lists()
			eventually(t, "rule health of "+in, func() bool { return rule()[in].Probed })
			if b := rule()[in]; !b.HealthKnown || !b.Healthy {
				t.Errorf("%s after rule health answered Up: %+v, want healthy", in, b)
			}
			if after := rd.lists(); after != before {
				t.Errorf("reading the rule again read %d NIC lists, want none (cached)", after-before)
			}
			calls, _ := emu.Calls(0)
			for _, c := range calls {
				if c.Write() || (c.Method != http.MethodGet && c.Method != http.MethodPost) {
					t.Errorf("a gate-only read made %s", c)
				}
			}
		})
	}
}

// TestForeignRuleNICPoolJoin: a node that joins a NIC-based pool after its
// NIC list was read is a miss. Until the list may be read again the rule
// is not answered (an error: a member of unknown address is not a node out
// of the pool, which would let a termination gate go); then the list is
// read again and the node is in the pool.
func TestForeignRuleNICPoolJoin(t *testing.T) {
	emu, c := nicWorld(t)
	if err := emu.Seed(subID, group, ccmLB("kubernetes-internal")); err != nil {
		t.Fatal(err)
	}
	seed := func(name, ip string) {
		t.Helper()
		if err := c.SeedVM(azurecompute.VM{Subscription: subID, ResourceGroup: group, SubnetID: nodeSubnet, Name: name,
			IP: netip.MustParseAddr(ip), Pools: []string{ccmPoolID}}); err != nil {
			t.Fatal(err)
		}
	}
	seed("node-a", "10.0.1.4")
	rd := &reads{}
	p := gateOnlyProviderWith(t, emu, rd)
	azure.SetIPConfigAges(p, time.Hour, time.Hour)
	ctx := context.Background()
	if r, err := p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP); err != nil || r == nil || len(r.Backends) != 1 {
		t.Fatalf("rule before the join: %+v, %v; want node-a", r, err)
	}
	seed("node-b", "10.0.1.5")
	time.Sleep(5 * time.Millisecond) // past BackendsMaxAge: the load balancer is read again
	r, err := p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP)
	if err == nil || !strings.Contains(err.Error(), azurecompute.NICName("node-b")) {
		t.Errorf("rule right after node-b joined: %+v, %v; want an error naming its ipconfig", r, err)
	}
	azure.SetIPConfigAges(p, 0, time.Hour)
	r, err = p.ForeignRule(ctx, "127.240.0.10", 80, model.TCP)
	if err != nil || r == nil || len(r.Backends) != 2 {
		t.Fatalf("rule once the list may be read again: %+v, %v; want node-a and node-b", r, err)
	}
	if rd.lists() != 2 {
		t.Errorf("%d NIC lists read, want 2 (the first read and the miss)", rd.lists())
	}
}
