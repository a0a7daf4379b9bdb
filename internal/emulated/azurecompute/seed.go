package azurecompute

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The cluster's machines exist before any controller runs: tests and the
// lab seed them.

// ScaleSet is a Uniform scale set to seed.
type ScaleSet struct {
	Subscription, ResourceGroup, Name string
	// ComputerNamePrefix starts every instance's computer name (its Node's
	// name); cloud-provider-azure compares it with a node name minus its
	// last six characters (pkg/provider/azure_vmss.go 777-838).
	ComputerNamePrefix string
	SubnetID           string
	// Pools are the backend pool IDs of the model's network profile, and so
	// of every instance's.
	Pools     []string
	Instances []Instance
}

// Instance is one scale-set VM: its instance ID and primary address.
type Instance struct {
	ID uint64
	IP netip.Addr
}

// maxInstanceID is the largest ID six base-36 digits hold.
const maxInstanceID = 36*36*36*36*36*36 - 1

// NodeName is the computer name — the Node's name — of a scale-set
// instance: the prefix and the instance ID in six base-36 digits, which is
// how cloud-provider-azure finds the instance of a node
// (getScaleSetVMInstanceID, pkg/provider/azure_vmss.go 742-754: ParseUint of
// the last six characters in base 36).
func NodeName(prefix string, id uint64) string {
	s := strconv.FormatUint(id, 36)
	return prefix + strings.Repeat("0", max(0, 6-len(s))) + s
}

const vmSize = armcompute.VirtualMachineSizeTypesStandardD2SV3

// SeedVMSS stores a Uniform scale set (upgrade policy Manual) and its
// instances, each with the model's network profile as its own
// networkProfileConfiguration, and returns the instances' node names.
func (c *Compute) SeedVMSS(s ScaleSet) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(s.ResourceGroup, s.Name)
	if _, ok := c.sets[k]; ok {
		return nil, fmt.Errorf("seed scale set %s: it exists", s.Name)
	}
	id := "/subscriptions/" + s.Subscription + "/resourceGroups/" + s.ResourceGroup +
		"/providers/Microsoft.Compute/virtualMachineScaleSets/" + s.Name
	nicCfg := &armcompute.VirtualMachineScaleSetNetworkConfiguration{Name: to.Ptr(s.Name),
		Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{Primary: to.Ptr(true),
			IPConfigurations: []*armcompute.VirtualMachineScaleSetIPConfiguration{{Name: to.Ptr("ipconfig1"),
				Properties: &armcompute.VirtualMachineScaleSetIPConfigurationProperties{Primary: to.Ptr(true),
					PrivateIPAddressVersion: to.Ptr(armcompute.IPVersionIPv4),
					Subnet:                  &armcompute.APIEntityReference{ID: to.Ptr(s.SubnetID)},
					LoadBalancerBackendAddressPools: func() (out []*armcompute.SubResource) {
						for _, p := range s.Pools {
							out = append(out, &armcompute.SubResource{ID: to.Ptr(p)})
						}
						return out
					}()}}}}}
	sku := &armcompute.SKU{Name: to.Ptr(string(vmSize)), Tier: to.Ptr("Standard"), Capacity: to.Ptr(int64(len(s.Instances)))}
	// orchestrationMode is always set: cloud-provider-azure dereferences it
	// without a nil check (pkg/provider/azure_vmssflex_cache.go line 67).
	model := &armcompute.VirtualMachineScaleSet{ID: to.Ptr(id), Name: to.Ptr(s.Name),
		Type: to.Ptr("Microsoft.Compute/virtualMachineScaleSets"), Location: to.Ptr(c.opts.Location),
		Etag: to.Ptr(c.nextEtag()), Tags: map[string]*string{}, SKU: sku,
		Properties: &armcompute.VirtualMachineScaleSetProperties{
			OrchestrationMode: to.Ptr(armcompute.OrchestrationModeUniform),
			ProvisioningState: to.Ptr("Succeeded"),
			UpgradePolicy:     &armcompute.UpgradePolicy{Mode: to.Ptr(armcompute.UpgradeModeManual)},
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				OSProfile: &armcompute.VirtualMachineScaleSetOSProfile{ComputerNamePrefix: to.Ptr(s.ComputerNamePrefix)},
				NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{
					NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{nicCfg}},
			}}}
	set := &scaleSet{model: model, instances: map[string]*instance{}}
	var names []string
	for _, in := range s.Instances {
		if in.ID > maxInstanceID {
			return nil, fmt.Errorf("seed scale set %s: instance ID %d does not fit six base-36 digits", s.Name, in.ID)
		}
		iid := strconv.FormatUint(in.ID, 10)
		if _, dup := set.instances[iid]; dup {
			return nil, fmt.Errorf("seed scale set %s: instance %s twice", s.Name, iid)
		}
		node := NodeName(s.ComputerNamePrefix, in.ID)
		vmID := id + "/virtualMachines/" + iid
		vm := &armcompute.VirtualMachineScaleSetVM{ID: to.Ptr(vmID), Name: to.Ptr(s.Name + "_" + iid), InstanceID: to.Ptr(iid),
			Type:     to.Ptr("Microsoft.Compute/virtualMachineScaleSets/virtualMachines"),
			Location: to.Ptr(c.opts.Location), Etag: to.Ptr(c.nextEtag()), Tags: map[string]*string{},
			SKU: &armcompute.SKU{Name: sku.Name, Tier: sku.Tier},
			Properties: &armcompute.VirtualMachineScaleSetVMProperties{
				OSProfile:       &armcompute.OSProfile{ComputerName: to.Ptr(node)},
				HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(vmSize)},
				// networkProfile.networkInterfaces: without it
				// cloud-provider-azure skips the VM as still being created
				// (pkg/provider/azure_vmss_cache.go 192-195).
				NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
					ID: to.Ptr(vmID + "/networkInterfaces/" + s.Name), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}}},
				// networkProfileConfiguration: dereferenced without a check
				// (pkg/provider/azure_vmss.go line 1118).
				NetworkProfileConfiguration: &armcompute.VirtualMachineScaleSetVMNetworkProfileConfiguration{
					NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{clone(nicCfg)}},
				ProvisioningState:  to.Ptr("Succeeded"),
				LatestModelApplied: to.Ptr(true),
				InstanceView: &armcompute.VirtualMachineScaleSetVMInstanceView{ComputerName: to.Ptr(node),
					Statuses: runningStatuses()},
			}}
		set.instances[iid] = &instance{vm: vm, ip: in.IP.String()}
		names = append(names, node)
	}
	c.sets[k] = set
	return names, nil
}

// VM is a virtual machine outside any scale set to seed, with one NIC.
type VM struct {
	Subscription, ResourceGroup string
	// Name is the VM's name and computer name, the Node's name
	// (cloud-provider-azure maps a node to its VM by name,
	// mapNodeNameToVMName, pkg/provider/azure_instances_v1.go line 449).
	Name string
	// AvailabilitySet, when set, names the availability set it is in.
	AvailabilitySet string
	SubnetID        string
	IP              netip.Addr
	// Pools are the backend pool IDs its NIC's ipconfig names.
	Pools []string
}

// NICName is the name of a seeded VM's network interface.
func NICName(vm string) string { return vm + "-nic" }

// SeedVM stores a VM and its network interface.
func (c *Compute) SeedVM(v VM) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.vms[key(v.ResourceGroup, v.Name)]; ok {
		return fmt.Errorf("seed VM %s: it exists", v.Name)
	}
	base := "/subscriptions/" + v.Subscription + "/resourceGroups/" + v.ResourceGroup + "/providers/"
	vmID := base + "Microsoft.Compute/virtualMachines/" + v.Name
	nicID := base + "Microsoft.Network/networkInterfaces/" + NICName(v.Name)
	// No properties.virtualMachineScaleSet: with one, cloud-provider-azure
	// takes the VM for a Flexible scale set's.
	vm := &armcompute.VirtualMachine{ID: to.Ptr(vmID), Name: to.Ptr(v.Name), Type: to.Ptr("Microsoft.Compute/virtualMachines"),
		Location: to.Ptr(c.opts.Location), Etag: to.Ptr(c.nextEtag()), Tags: map[string]*string{},
		Properties: &armcompute.VirtualMachineProperties{
			OSProfile:       &armcompute.OSProfile{ComputerName: to.Ptr(v.Name)},
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(vmSize)},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID: to.Ptr(nicID), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}}},
			ProvisioningState: to.Ptr("Succeeded"),
		}}
	if v.AvailabilitySet != "" {
		vm.Properties.AvailabilitySet = &armcompute.SubResource{ID: to.Ptr(base + "Microsoft.Compute/availabilitySets/" + v.AvailabilitySet)}
	}
	ipc := &armnetwork.InterfaceIPConfiguration{ID: to.Ptr(nicID + "/ipConfigurations/ipconfig1"), Name: to.Ptr("ipconfig1"),
		Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Primary: to.Ptr(true),
			PrivateIPAddress: to.Ptr(v.IP.String()), PrivateIPAddressVersion: to.Ptr(armnetwork.IPVersionIPv4),
			PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
			ProvisioningState:         to.Ptr(armnetwork.ProvisioningStateSucceeded),
			Subnet:                    &armnetwork.Subnet{ID: to.Ptr(v.SubnetID)}}}
	for _, p := range v.Pools {
		ipc.Properties.LoadBalancerBackendAddressPools = append(ipc.Properties.LoadBalancerBackendAddressPools, &armnetwork.BackendAddressPool{ID: to.Ptr(p)})
	}
	nic := &armnetwork.Interface{ID: to.Ptr(nicID), Name: to.Ptr(NICName(v.Name)), Type: to.Ptr("Microsoft.Network/networkInterfaces"),
		Location: to.Ptr(c.opts.Location), Etag: to.Ptr(c.nextEtag()),
		Properties: &armnetwork.InterfacePropertiesFormat{Primary: to.Ptr(true),
			ProvisioningState: to.Ptr(armnetwork.ProvisioningStateSucceeded),
			VirtualMachine:    &armnetwork.SubResource{ID: to.Ptr(vmID)},
			IPConfigurations:  []*armnetwork.InterfaceIPConfiguration{ipc}}}
	c.vms[key(v.ResourceGroup, v.Name)] = vm
	c.nics[key(v.ResourceGroup, NICName(v.Name))] = nic
	return nil
}
