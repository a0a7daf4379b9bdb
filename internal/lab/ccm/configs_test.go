package ccm_test

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// ccmCase is one configuration of the CCM: its azure.json beyond
// ccm.Config's, its machines and nodes, and what its pools hold after a
// sync.
type ccmCase struct {
	name  string // also the case's namespace
	extra map[string]any
	setup func(t *testing.T, w *world)
	// poolIPs are the pools' addresses (pools of node IPs); none for NIC
	// pools, whose members checkPools reads on the compute side.
	poolIPs    []string
	checkPools func(t *testing.T, w *world)
}

const (
	scaleSet = "k8s-pool"
	lbIDs    = "/subscriptions/" + sub + "/resourceGroups/" + group + "/providers/Microsoft.Network/loadBalancers/"
)

// The two pools every NIC-pool case's nodes must be in: the CCM's
// clusterName pool on the public and on the internal load balancer.
var wantPools = []string{
	strings.ToLower(lbIDs + "kubernetes-internal/backendAddressPools/kubernetes"),
	strings.ToLower(lbIDs + "kubernetes/backendAddressPools/kubernetes"),
}

func ccmCases() []ccmCase {
	return []ccmCase{
		{
			// The lab's configuration: vmType standard, pools of node IPs
			// (ccm.Config.CloudConfig), and no compute in the emulator.
			name: ccm.ConfigNodeIP,
			setup: func(t *testing.T, w *world) {
				w.Node(t, "node-1", "10.1.0.4", nil)
				w.Node(t, "node-2", "10.1.0.5", nil)
			},
			poolIPs:    []string{"10.1.0.4", "10.1.0.5"},
			checkPools: func(*testing.T, *world) {},
		},
		{
			// azure.json's defaults, which a self-managed cluster gets when
			// it leaves both keys out: vmType vmss and
			// nodeIPConfiguration pools (cloud-provider-azure v1.36.3,
			// pkg/provider/azure.go 278-281 and 304-307). Two scale-set
			// instances, and an availability-set VM beside them, which
			// vmType vmss also serves (ScaleSet.EnsureHostsInPool,
			// azure_vmss.go 1546-1620).
			name:  ccm.ConfigVMSS,
			extra: ccm.ConfigExtra(ccm.ConfigVMSS, nil),
			setup: func(t *testing.T, w *world) {
				c := w.attachCompute()
				ms, err := ccm.SeedScaleSet(c, w.Base.Resources, scaleSet, scaleSet,
					[]azurecompute.Instance{{ID: 0, IP: netip.MustParseAddr("10.1.0.4")}, {ID: 1, IP: netip.MustParseAddr("10.1.0.5")}})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range ms {
					w.NodeWithProviderID(t, m.Node, m.IP.String(), m.ProviderID, nil)
				}
				w.seedVM(t, c, "system-1", "10.1.0.6", "as-system")
			},
			checkPools: func(t *testing.T, w *world) {
				c := w.compute(t)
				if m, ok := c.ScaleSet(group, scaleSet); !ok || !samePools(azurecompute.PrimaryPools(
					m.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations)) {
					t.Errorf("scale set model: pools %v, want %v", poolsOfModel(c), wantPools)
				}
				for i := range 2 {
					vm, ok := c.ScaleSetVM(group, scaleSet, strconv.Itoa(i))
					if !ok {
						t.Fatalf("no instance %d", i)
					}
					if got := azurecompute.PrimaryPools(vm.Properties.NetworkProfileConfiguration.NetworkInterfaceConfigurations); !samePools(got) {
						t.Errorf("instance %d's networkProfileConfiguration: pools %v, want %v", i, got, wantPools)
					}
				}
				checkNICPools(t, c, "system-1")
				checkMembers(t, w, 3)
			},
		},
		{
			// vmType standard with NIC pools: VMs in an availability set,
			// each NIC's primary ipconfig joins the pools
			// (availabilitySet.EnsureHostInPool, azure_standard.go 864-946).
			name:  ccm.ConfigStandard,
			extra: ccm.ConfigExtra(ccm.ConfigStandard, nil),
			setup: func(t *testing.T, w *world) {
				c := w.attachCompute()
				w.seedVM(t, c, "vm-1", "10.1.0.4", "as-nodes")
				w.seedVM(t, c, "vm-2", "10.1.0.5", "as-nodes")
			},
			checkPools: func(t *testing.T, w *world) {
				c := w.compute(t)
				checkNICPools(t, c, "vm-1")
				checkNICPools(t, c, "vm-2")
				checkMembers(t, w, 2)
			},
		},
	}
}

// attachCompute gives the case's emulator a compute side.
func (w *world) attachCompute() *azurecompute.Compute {
	w.cmp = azurecompute.New(azurecompute.Options{Location: "westeurope"})
	w.Emu.AttachCompute(w.cmp)
	return w.cmp
}

func (w *world) compute(t *testing.T) *azurecompute.Compute {
	t.Helper()
	if w.cmp == nil {
		t.Fatal("no compute attached")
	}
	return w.cmp
}

// seedVM seeds a VM in an availability set, with no pools, and its node
// (ccm.SeedVM).
func (w *world) seedVM(t *testing.T, c *azurecompute.Compute, name, ip, avset string) {
	t.Helper()
	m, err := ccm.SeedVM(c, w.Base.Resources, name, netip.MustParseAddr(ip), avset)
	if err != nil {
		t.Fatal(err)
	}
	w.NodeWithProviderID(t, m.Node, m.IP.String(), m.ProviderID, nil)
}

func samePools(got []string) bool {
	got = slices.Clone(got)
	slices.Sort(got)
	return slices.Equal(got, wantPools)
}

func poolsOfModel(c *azurecompute.Compute) []string {
	m, ok := c.ScaleSet(group, scaleSet)
	if !ok {
		return nil
	}
	return azurecompute.PrimaryPools(m.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations)
}

func checkNICPools(t *testing.T, c *azurecompute.Compute, vm string) {
	t.Helper()
	nic, ok := c.NIC(group, azurecompute.NICName(vm))
	if !ok {
		t.Fatalf("no NIC of %s", vm)
	}
	if got := azurecompute.NICPools(nic); !samePools(got) {
		t.Errorf("%s's NIC: pools %v, want %v", vm, got, wantPools)
	}
}

// checkMembers: each load balancer's pool, as a GET shows it, has n
// members (backendIPConfigurations, derived from the compute side).
func checkMembers(t *testing.T, w *world, n int) {
	t.Helper()
	for _, name := range []string{"kubernetes", "kubernetes-internal"} {
		lb, ok := w.Emu.LoadBalancer(group, name)
		if !ok {
			t.Fatalf("no load balancer %s", name)
		}
		for _, p := range lb.Properties.BackendAddressPools {
			if got := len(p.Properties.BackendIPConfigurations); str(p.Name) == "kubernetes" && got != n {
				t.Errorf("%s pool %s: %d members %s, want %d", name, str(p.Name), got, dump(p.Properties.BackendIPConfigurations), n)
			}
		}
	}
}
