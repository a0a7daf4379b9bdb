package azure

import (
	"context"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// TestDriftPool: the pool drift takes the first node by name out of the
// pool's derived backendIPConfigurations with one PUT under its own
// identity, which the writers' figures leave out; a PUT that puts the pool
// back (the CCM's repair) restores it. Emulator side only, no lab.
func TestDriftPool(t *testing.T) {
	poolID := "/subscriptions/" + azSub + "/resourceGroups/" + azGroup +
		"/providers/Microsoft.Network/loadBalancers/" + ccmLB + "/backendAddressPools/kubernetes"
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	for _, config := range []string{ccm.ConfigVMSS, ccm.ConfigStandard} {
		t.Run(config, func(t *testing.T) {
			ctx := context.Background()
			emu := azurearm.New(azurearm.Options{})
			c := azurecompute.New(azurecompute.Options{})
			emu.AttachCompute(c)
			served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = served.Close() })
			// Seeded in the pool in reverse order of name: the drift
			// must pick by name, not by seeding order.
			var nodes []string
			switch config {
			case ccm.ConfigVMSS:
				nodes, err = c.SeedVMSS(azurecompute.ScaleSet{Subscription: azSub, ResourceGroup: azGroup, Name: labScaleSet,
					ComputerNamePrefix: labComputerPrefix, SubnetID: ccmResources.SubnetID(), Pools: []string{poolID},
					Instances: []azurecompute.Instance{{ID: 2, IP: ips[0]}, {ID: 1, IP: ips[1]}}})
			case ccm.ConfigStandard:
				for i, n := range []string{"node-b", "node-a"} {
					if err == nil {
						err = c.SeedVM(azurecompute.VM{Subscription: azSub, ResourceGroup: azGroup, Name: n,
							SubnetID: ccmResources.SubnetID(), IP: ips[i], Pools: []string{poolID}})
					}
					nodes = append(nodes, n)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			all := c.BackendIPConfigurations(poolID)
			if len(all) != 2 {
				t.Fatalf("seeded pool members %v, want 2", all)
			}
			_, mark := emu.Calls(0)

			node, err := driftPool(ctx, served, config)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Min(nodes); node != want {
				t.Fatalf("drifted node %q, want the first by name, %q", node, want)
			}
			left := c.BackendIPConfigurations(poolID)
			if len(left) != 1 || strings.Contains(strings.ToLower(left[0]), strings.ToLower(ipconfigPart(config, node))) {
				t.Fatalf("pool members after the drift of %s: %v (before: %v)", node, left, all)
			}
			calls, _ := emu.Calls(mark)
			var writes []azurearm.Call
			for _, call := range calls {
				if call.Client != driftIdentity {
					t.Errorf("call %s: want client %s", call, driftIdentity)
				}
				if call.Write() {
					writes = append(writes, call)
				}
			}
			if len(writes) != 1 || len(writes[0].Changes) == 0 {
				t.Fatalf("drift writes %v, want one that changed something", writes)
			}
			if f, d := figuresOf(calls), diffsOf(calls); !reflect.DeepEqual(f, recordFigures{}) || d != (writeDiffs{}) {
				t.Errorf("the drift counted among the writers' figures: %+v %+v", f, d)
			}
			if wd := writeDiffsOf(calls, mark, nil); len(wd) != 1 || !strings.HasPrefix(wd[0].Call, driftIdentity+" PUT") {
				t.Errorf("write diffs %+v: want the drift's PUT under its identity", wd)
			}

			_, mark = emu.Calls(0)
			repair(t, served, config, node, poolID)
			if got := c.BackendIPConfigurations(poolID); !slices.Equal(got, all) {
				t.Fatalf("pool members after the repair %v, want %v", got, all)
			}
			if calls, _ := emu.Calls(mark); figuresOf(calls).changed != 1 {
				t.Errorf("the repair: writers' figures %+v, want 1 write that changed something", figuresOf(calls))
			}
		})
	}
}

// ipconfigPart is what a node's ipconfig ID holds: its NIC's name, or its
// scale-set instance's path.
func ipconfigPart(config, node string) string {
	if config == ccm.ConfigStandard {
		return "/networkInterfaces/" + azurecompute.NICName(node) + "/"
	}
	return "/virtualMachines/" + strings.TrimLeft(strings.TrimPrefix(node, labComputerPrefix), "0") + "/"
}

// repair puts the pool back on node's instance or NIC through a normal
// PUT, as the CCM does, with the current ETag in If-Match.
func repair(t *testing.T, served *azurearm.Served, config, node, poolID string) {
	t.Helper()
	cred, opts, err := azurearm.Remote(served.URL, served.CAPEM, "ccm")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pools := []*armcompute.SubResource{{ID: to.Ptr(poolID)}}
	switch config {
	case ccm.ConfigVMSS:
		vms, err := armcompute.NewVirtualMachineScaleSetVMsClient(azSub, cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimLeft(strings.TrimPrefix(node, labComputerPrefix), "0")
		vm, err := vms.Get(ctx, azGroup, labScaleSet, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		ipc := vm.Properties.NetworkProfileConfiguration.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0]
		ipc.Properties.LoadBalancerBackendAddressPools = pools
		p, err := vms.BeginUpdate(ctx, azGroup, labScaleSet, id, vm.VirtualMachineScaleSetVM,
			&armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
		if err == nil {
			_, err = p.PollUntilDone(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	case ccm.ConfigStandard:
		nics, err := armnetwork.NewInterfacesClient(azSub, cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		nic, err := nics.Get(ctx, azGroup, azurecompute.NICName(node), nil)
		if err != nil {
			t.Fatal(err)
		}
		nic.Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools = []*armnetwork.BackendAddressPool{{ID: to.Ptr(poolID)}}
		p, err := nics.BeginCreateOrUpdate(ctx, azGroup, *nic.Name, nic.Interface, nil)
		if err == nil {
			_, err = p.PollUntilDone(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
