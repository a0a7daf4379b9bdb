package azurecompute_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// The acceptance test: a load-balancer PUT whose pool lists a
// foreign ipconfig and omits a real one does not change the pool's
// membership; a GET returns the members the NICs and scale-set VMs name.
func TestPoolMembershipIsNICDerived(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.seedVMSS(t, 2, true)
	if err := w.compute.SeedVM(azurecompute.VM{Subscription: sub, ResourceGroup: rg, Name: "vm-a", AvailabilitySet: "as",
		SubnetID: subnetID, IP: netip4(10, 224, 1, 4), Pools: []string{poolID}}); err != nil {
		t.Fatal(err)
	}
	want := []string{nicIPConfig("vm-a"), vmssIPConfig("0"), vmssIPConfig("1")}
	slices.Sort(want)
	if got := w.members(t); !slices.Equal(got, want) {
		t.Fatalf("seeded membership %v, want %v", got, want)
	}

	lbs := w.net.NewLoadBalancersClient()
	lb, err := lbs.Get(ctx, rg, lbName, nil)
	if err != nil {
		t.Fatal(err)
	}
	foreign := "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/networkInterfaces/foreign-nic/ipConfigurations/ipconfig1"
	lb.Properties.BackendAddressPools[0].Properties.BackendIPConfigurations = []*armnetwork.InterfaceIPConfiguration{
		{ID: to.Ptr(foreign)}, {ID: to.Ptr(vmssIPConfig("0"))}} // vm-a's and instance 1's left out
	p, err := lbs.BeginCreateOrUpdate(ctx, rg, lbName, lb.LoadBalancer, &armnetwork.LoadBalancersClientBeginCreateOrUpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := w.members(t); !slices.Equal(got, want) {
		t.Fatalf("after a PUT listing a foreign ipconfig: membership %v, want %v", got, want)
	}
	bp, err := w.net.NewLoadBalancerBackendAddressPoolsClient().Get(ctx, rg, lbName, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range bp.Properties.BackendIPConfigurations {
		got = append(got, *c.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("pool GET: membership %v, want %v", got, want)
	}
}

// A scale-set instance joins a pool when its networkProfileConfiguration
// names it (the CCM's EnsureHostInPool, an update with If-Match); the model
// alone does not move an instance, and a stale ETag gets 412.
func TestVMSSVMUpdateJoinsPool(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.seedVMSS(t, 2, false)
	if got := w.members(t); len(got) != 0 {
		t.Fatalf("pool members before any update: %v", got)
	}

	// The model gains the pool (ensureVMSSInPool): no instance moves.
	sets := w.cmp.NewVirtualMachineScaleSetsClient()
	set, err := sets.Get(ctx, rg, vmss, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *set.Properties.OrchestrationMode != armcompute.OrchestrationModeUniform {
		t.Fatalf("orchestrationMode %v", *set.Properties.OrchestrationMode)
	}
	np := set.Properties.VirtualMachineProfile.NetworkProfile
	ipc := np.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0]
	ipc.Properties.LoadBalancerBackendAddressPools = append(ipc.Properties.LoadBalancerBackendAddressPools, &armcompute.SubResource{ID: to.Ptr(poolID)})
	body := armcompute.VirtualMachineScaleSet{Location: set.Location, Etag: set.Etag,
		Properties: &armcompute.VirtualMachineScaleSetProperties{VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{NetworkProfile: np}}}
	sp, err := sets.BeginCreateOrUpdate(ctx, rg, vmss, body, &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{IfMatch: set.Etag})
	if err != nil {
		t.Fatal(err)
	}
	updated, err := sp.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *updated.Properties.VirtualMachineProfile.OSProfile.ComputerNamePrefix != prefix {
		t.Fatal("the scale-set PUT dropped the computerNamePrefix it did not send")
	}
	_, err = sets.BeginCreateOrUpdate(ctx, rg, vmss, body, &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{IfMatch: set.Etag})
	wantStatus(t, "scale-set PUT with a stale If-Match", err, http.StatusPreconditionFailed)
	if got := w.members(t); len(got) != 0 {
		t.Fatalf("pool members after a model update alone: %v", got)
	}

	vms := w.cmp.NewVirtualMachineScaleSetVMsClient()
	vm, err := vms.Get(ctx, rg, vmss, "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Properties.LatestModelApplied == nil || *vm.Properties.LatestModelApplied {
		t.Fatal("instance 1 says the changed model is applied")
	}
	cfg := vm.Properties.NetworkProfileConfiguration
	vc := cfg.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0]
	vc.Properties.LoadBalancerBackendAddressPools = append(vc.Properties.LoadBalancerBackendAddressPools, &armcompute.SubResource{ID: to.Ptr(poolID)})
	// The body the CCM sends (pkg/provider/azure_vmss.go 1180-1189).
	upd := armcompute.VirtualMachineScaleSetVM{Location: vm.Location, Etag: vm.Etag,
		Properties: &armcompute.VirtualMachineScaleSetVMProperties{NetworkProfileConfiguration: cfg, HardwareProfile: vm.Properties.HardwareProfile}}
	up, err := vms.BeginUpdate(ctx, rg, vmss, "1", upd, &armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
	if err != nil {
		t.Fatal(err)
	}
	res, err := up.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *res.Etag == *vm.Etag {
		t.Fatal("the update kept the instance's ETag")
	}
	if *res.Properties.OSProfile.ComputerName != azurecompute.NodeName(prefix, 1) {
		t.Fatalf("the update lost the computer name: %v", *res.Properties.OSProfile.ComputerName)
	}
	if got, want := w.members(t), []string{vmssIPConfig("1")}; !slices.Equal(got, want) {
		t.Fatalf("pool members after instance 1's update: %v, want %v", got, want)
	}
	_, err = vms.BeginUpdate(ctx, rg, vmss, "1", upd, &armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
	wantStatus(t, "instance update with a stale If-Match", err, http.StatusPreconditionFailed)

	// The ARM emulator's record holds the update with what it changed.
	calls, _ := w.emu.Calls(0)
	i := slices.IndexFunc(calls, func(c azurearm.Call) bool { return c.Write() && c.Kind == "virtualMachineScaleSetVM" })
	if i < 0 {
		t.Fatalf("no instance update recorded: %v", calls)
	}
	if c := calls[i]; c.Resource != rg+"/"+vmss+"/1" || !slices.ContainsFunc(c.Changes, func(l string) bool {
		return strings.Contains(l, "loadBalancerBackendAddressPools") && strings.Contains(l, poolID)
	}) {
		t.Fatalf("recorded %s, changes %q", c.Resource, c.Changes)
	}
}

// A standalone VM's NIC joins a pool by a NIC PUT; a stale If-Match is
// refused.
func TestNICUpdateJoinsPool(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := w.compute.SeedVM(azurecompute.VM{Subscription: sub, ResourceGroup: rg, Name: "vm-a", AvailabilitySet: "as",
		SubnetID: subnetID, IP: netip4(10, 224, 1, 4)}); err != nil {
		t.Fatal(err)
	}
	nics := w.net.NewInterfacesClient()
	nic, err := nics.Get(ctx, rg, azurecompute.NICName("vm-a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := *nic.Etag
	ipc := nic.Properties.IPConfigurations[0]
	ipc.Properties.LoadBalancerBackendAddressPools = []*armnetwork.BackendAddressPool{{ID: to.Ptr(poolID)}}
	p, err := nics.BeginCreateOrUpdate(ctx, rg, azurecompute.NICName("vm-a"), nic.Interface, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := w.members(t), []string{nicIPConfig("vm-a")}; !slices.Equal(got, want) {
		t.Fatalf("pool members after the NIC PUT: %v, want %v", got, want)
	}
	after, err := nics.Get(ctx, rg, azurecompute.NICName("vm-a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := *after.Properties.IPConfigurations[0].Properties.PrivateIPAddress; got != "10.224.1.4" {
		t.Fatalf("the NIC's address after the PUT: %s", got)
	}
	// The CCM's interface client sends no If-Match; ARM honours one sent.
	staleCtx := policy.WithHTTPHeader(ctx, http.Header{"If-Match": {stale}})
	_, err = nics.BeginCreateOrUpdate(staleCtx, rg, azurecompute.NICName("vm-a"), nic.Interface, nil)
	wantStatus(t, "NIC PUT with a stale If-Match", err, http.StatusPreconditionFailed)
	vmsResp, err := w.cmp.NewVirtualMachinesClient().Get(ctx, rg, "vm-a", &armcompute.VirtualMachinesClientGetOptions{Expand: to.Ptr(armcompute.InstanceViewTypesInstanceView)})
	if err != nil {
		t.Fatal(err)
	}
	if *vmsResp.Properties.NetworkProfile.NetworkInterfaces[0].ID != *nic.ID || !hasRunning(vmsResp.Properties.InstanceView.Statuses) {
		t.Fatalf("VM: NIC %s, instance view %v", *vmsResp.Properties.NetworkProfile.NetworkInterfaces[0].ID, vmsResp.Properties.InstanceView)
	}
}

// Listing a scale set's VMs with their instance view (the CCM's default)
// gives each a running power state and a computer name the CCM maps back to
// the instance ID (the last six characters in base 36).
func TestListVMSSVMsWithInstanceView(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	names := w.seedVMSS(t, 3, true)
	pager := w.cmp.NewVirtualMachineScaleSetVMsClient().NewListPager(rg, vmss, &armcompute.VirtualMachineScaleSetVMsClientListOptions{Expand: to.Ptr("instanceView")})
	var got []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range page.Value {
			name := *vm.Properties.OSProfile.ComputerName
			id, err := strconv.ParseUint(name[len(name)-6:], 36, 64)
			if err != nil || strconv.FormatUint(id, 10) != *vm.InstanceID {
				t.Fatalf("computer name %s does not map to instance %s", name, *vm.InstanceID)
			}
			if vm.Properties.InstanceView == nil || !hasRunning(vm.Properties.InstanceView.Statuses) {
				t.Fatalf("instance %s: no running instance view", *vm.InstanceID)
			}
			if vm.Properties.NetworkProfileConfiguration == nil || vm.Properties.NetworkProfile == nil {
				t.Fatalf("instance %s: no network profile (configuration)", *vm.InstanceID)
			}
			got = append(got, name)
		}
	}
	if !slices.Equal(got, names) || names[2] != "aks-nodepool1-000002" {
		t.Fatalf("listed %v, seeded %v", got, names)
	}
	plain, err := w.cmp.NewVirtualMachineScaleSetVMsClient().Get(ctx, rg, vmss, "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Properties.InstanceView != nil {
		t.Fatal("a GET without $expand returned the instance view")
	}
}

// vmssIPConfigurationRE is cloud-provider-azure's (pkg/provider/azure_vmss.go
// line 59): case-sensitive.
var vmssIPConfigurationRE = regexp.MustCompile(`.*/subscriptions/(?:.*)/resourceGroups/(.+)/providers/Microsoft.Compute/virtualMachineScaleSets/(.+)/virtualMachines/(.+)/networkInterfaces(?:.*)`)

// The scale-set VM NIC API (list and get) shows an instance's NIC with its
// address, its pools, and ipconfig IDs the CCM's regular expression parses.
func TestListVMSSVMNICs(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.seedVMSS(t, 2, true)
	nics := w.net.NewInterfacesClient()
	pager := nics.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(rg, vmss, "1", nil)
	var listed []*armnetwork.Interface
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page.Value...)
	}
	if len(listed) != 1 {
		t.Fatalf("%d NICs, want 1", len(listed))
	}
	nic, err := nics.GetVirtualMachineScaleSetNetworkInterface(ctx, rg, vmss, "1", *listed[0].Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	ipc := nic.Properties.IPConfigurations[0]
	if *ipc.ID != vmssIPConfig("1") || !vmssIPConfigurationRE.MatchString(*ipc.ID) {
		t.Fatalf("ipconfig ID %s", *ipc.ID)
	}
	if *ipc.Properties.PrivateIPAddress != "10.224.0.11" || len(ipc.Properties.LoadBalancerBackendAddressPools) != 1 ||
		*ipc.Properties.LoadBalancerBackendAddressPools[0].ID != poolID {
		t.Fatalf("ipconfig: address %s, pools %v", *ipc.Properties.PrivateIPAddress, ipc.Properties.LoadBalancerBackendAddressPools)
	}
	_, err = nics.GetVirtualMachineScaleSetNetworkInterface(ctx, rg, vmss, "7", *listed[0].Name, nil)
	wantStatus(t, "NIC of an instance that does not exist", err, http.StatusNotFound)
}

func hasRunning(statuses []*armcompute.InstanceViewStatus) bool {
	return slices.ContainsFunc(statuses, func(s *armcompute.InstanceViewStatus) bool { return *s.Code == "PowerState/running" })
}
