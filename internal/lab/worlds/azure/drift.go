package azure

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// restart-idle's pool drift (Options.IdleChange IdleChangePoolDrift, with
// NIC-based pools): while no writer leads, one node leaves the backend
// pools out of band, as infrastructure code that rewrites a scale-set VM's
// network profile (with vmType standard, a NIC) without the pool would —
// Terraform, CAPZ, an ARM template (research note on the CCM's restart,
// "drift repaired at every reconcile"). cloud-provider-azure v1.36.3
// re-adds a pool missing from an instance or a NIC whenever it reconciles
// the Service (pkg/provider/azure_vmss.go 1148-1151, azure_standard.go
// 909-944): the question is whether a restart does, and what the traffic
// sees meanwhile.
//
// The drift is a real ARM PUT through the emulator's HTTPS API,
// read-modify-write with the read's ETag in If-Match, as such tools send
// it, under its own identity (driftIdentity): figuresOf and diffsOf leave
// its calls out of the writers' figures, and writeDiffsOf lists its write
// under that name.

// driftIdentity names the drift's calls in the emulator's record.
const driftIdentity = "infrastructure"

// driftPool removes from the backend pools the first node by name whose
// primary ipconfig is in one, and returns the node's name ("" when no node
// is in a pool: nothing to drift).
func driftPool(ctx context.Context, served *azurearm.Served, config string) (string, error) {
	cred, opts, err := azurearm.Remote(served.URL, served.CAPEM, driftIdentity)
	if err != nil {
		return "", err
	}
	done := &runtime.PollUntilDoneOptions{Frequency: time.Second} // the emulator's Retry-After-Ms is shorter
	switch config {
	case ccm.ConfigVMSS:
		c, err := armcompute.NewVirtualMachineScaleSetVMsClient(azSub, cred, opts)
		if err != nil {
			return "", err
		}
		var vms []*armcompute.VirtualMachineScaleSetVM
		for p := c.NewListPager(azGroup, labScaleSet, nil); p.More(); {
			page, err := p.NextPage(ctx)
			if err != nil {
				return "", fmt.Errorf("pool drift: list the scale set's instances: %w", err)
			}
			vms = append(vms, page.Value...)
		}
		slices.SortFunc(vms, func(a, b *armcompute.VirtualMachineScaleSetVM) int {
			return cmp.Compare(*a.Properties.OSProfile.ComputerName, *b.Properties.OSProfile.ComputerName)
		})
		for _, vm := range vms {
			npc := vm.Properties.NetworkProfileConfiguration
			if npc == nil || len(azurecompute.PrimaryPools(npc.NetworkInterfaceConfigurations)) == 0 {
				continue
			}
			for _, cfg := range npc.NetworkInterfaceConfigurations {
				for _, ipc := range cfg.Properties.IPConfigurations {
					if ipc.Properties != nil {
						ipc.Properties.LoadBalancerBackendAddressPools = nil
					}
				}
			}
			poller, err := c.BeginUpdate(ctx, azGroup, labScaleSet, *vm.InstanceID, *vm,
				&armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
			if err == nil {
				_, err = poller.PollUntilDone(ctx, done)
			}
			if err != nil {
				return "", fmt.Errorf("pool drift: update instance %s: %w", *vm.InstanceID, err)
			}
			return *vm.Properties.OSProfile.ComputerName, nil
		}
	case ccm.ConfigStandard:
		c, err := armnetwork.NewInterfacesClient(azSub, cred, opts)
		if err != nil {
			return "", err
		}
		var nics []*armnetwork.Interface
		for p := c.NewListPager(azGroup, nil); p.More(); {
			page, err := p.NextPage(ctx)
			if err != nil {
				return "", fmt.Errorf("pool drift: list the network interfaces: %w", err)
			}
			nics = append(nics, page.Value...)
		}
		slices.SortFunc(nics, func(a, b *armnetwork.Interface) int { return cmp.Compare(*a.Name, *b.Name) })
		for _, nic := range nics {
			if len(azurecompute.NICPools(nic)) == 0 {
				continue
			}
			for _, ipc := range nic.Properties.IPConfigurations {
				ipc.Properties.LoadBalancerBackendAddressPools = nil
			}
			// armnetwork's options carry no If-Match; ARM's network
			// provider honours the header.
			ifMatch := runtime.WithHTTPHeader(ctx, http.Header{"If-Match": {*nic.Etag}})
			poller, err := c.BeginCreateOrUpdate(ifMatch, azGroup, *nic.Name, *nic, nil)
			if err == nil {
				_, err = poller.PollUntilDone(ctx, done)
			}
			if err != nil {
				return "", fmt.Errorf("pool drift: update network interface %s: %w", *nic.Name, err)
			}
			vm := *nic.Properties.VirtualMachine.ID // the NIC's VM, named as its node
			return vm[strings.LastIndex(vm, "/")+1:], nil
		}
	default:
		return "", fmt.Errorf("pool drift: CCM configuration %q has no NIC-based pools", config)
	}
	return "", nil
}
