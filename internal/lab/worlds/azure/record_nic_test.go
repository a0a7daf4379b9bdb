package azure

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// TestRecordNICRemovals: with NIC-based pools a member leaves a pool by a
// compute write — a scale-set instance's update or a NIC's PUT whose
// ipconfig no longer names the pool — and the record's figures count each
// as a backend removed, as they count an address removed from an IP-based
// pool; a write that only reorders an ipconfig's pools removes none.
// (Before, only IP-based pools' addresses were counted: 0 here.)
func TestRecordNICRemovals(t *testing.T) {
	ctx := context.Background()
	emu := azurearm.New(azurearm.Options{})
	c := azurecompute.New(azurecompute.Options{Location: azLocation})
	emu.AttachCompute(c)
	lbID := "/subscriptions/" + azSub + "/resourceGroups/" + azGroup + "/providers/Microsoft.Network/loadBalancers/" + ccmLB
	poolA, poolB := lbID+"/backendAddressPools/kubernetes", lbID+"/backendAddressPools/other"
	if _, err := c.SeedVMSS(azurecompute.ScaleSet{Subscription: azSub, ResourceGroup: azGroup, Name: labScaleSet,
		ComputerNamePrefix: labComputerPrefix, SubnetID: azSubnetID(), Pools: []string{poolA, poolB},
		Instances: []azurecompute.Instance{{ID: 1, IP: netip.MustParseAddr("10.0.0.1")}, {ID: 2, IP: netip.MustParseAddr("10.0.0.2")}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SeedVM(azurecompute.VM{Subscription: azSub, ResourceGroup: azGroup, Name: "vm-1", SubnetID: azSubnetID(),
		IP: netip.MustParseAddr("10.0.0.3"), Pools: []string{poolA}}); err != nil {
		t.Fatal(err)
	}
	served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	cred, opts, err := azurearm.Remote(served.URL, served.CAPEM, "test")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := armcompute.NewClientFactory(azSub, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	nf, err := armnetwork.NewClientFactory(azSub, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	vms := cf.NewVirtualMachineScaleSetVMsClient()
	// Instance 1 leaves pool A (B moves to its place); instance 2's pools
	// are only reordered.
	for id, pools := range map[string][]string{"1": {poolB}, "2": {poolB, poolA}} {
		vm, err := vms.Get(ctx, azGroup, labScaleSet, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := vm.Properties.NetworkProfileConfiguration
		ipc := cfg.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0]
		ipc.Properties.LoadBalancerBackendAddressPools = nil
		for _, p := range pools {
			ipc.Properties.LoadBalancerBackendAddressPools = append(ipc.Properties.LoadBalancerBackendAddressPools, &armcompute.SubResource{ID: to.Ptr(p)})
		}
		upd := armcompute.VirtualMachineScaleSetVM{Location: vm.Location, Etag: vm.Etag,
			Properties: &armcompute.VirtualMachineScaleSetVMProperties{NetworkProfileConfiguration: cfg, HardwareProfile: vm.Properties.HardwareProfile}}
		p, err := vms.BeginUpdate(ctx, azGroup, labScaleSet, id, upd, &armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
		if err == nil {
			_, err = p.PollUntilDone(ctx, nil)
		}
		if err != nil {
			t.Fatalf("update instance %s: %v", id, err)
		}
	}
	// vm-1's NIC leaves pool A.
	nics := nf.NewInterfacesClient()
	nic, err := nics.Get(ctx, azGroup, azurecompute.NICName("vm-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	nic.Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools = nil
	p, err := nics.BeginCreateOrUpdate(ctx, azGroup, azurecompute.NICName("vm-1"), nic.Interface, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		t.Fatalf("put vm-1's NIC: %v", err)
	}
	calls, _ := emu.Calls(0)
	if d := diffsOf(calls); d.removedBackends != 2 {
		for _, c := range calls {
			if c.Write() {
				t.Logf("%s %q", c, c.Changes)
			}
		}
		t.Errorf("%d backends removed, want 2 (instance 1 from pool A, vm-1 from pool A; instance 2's reorder none)", d.removedBackends)
	}
}
