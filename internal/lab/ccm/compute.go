package ccm

import (
	"fmt"
	"maps"
	"net/netip"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// The CCM's configurations as clusters run it, and the machines each needs
// in the emulator's compute side for its nodes: TestRealCCM and the lab's
// Azure world seed them with the functions below, one way.

// The configurations (cloud-provider-azure v1.36.3, pkg/provider/azure.go
// 278-281 and 304-307: an azure.json without vmType gets vmss, one without
// loadBalancerBackendPoolConfigurationType gets nodeIPConfiguration).
const (
	// ConfigNodeIP: vmType standard, pools of node IPs (Config.CloudConfig
	// as it is); no compute side.
	ConfigNodeIP = "nodeip"
	// ConfigVMSS: azure.json's defaults, vmType vmss and NIC-based pools
	// (the scale-set instances' networkProfileConfiguration).
	ConfigVMSS = "vmss"
	// ConfigStandard: vmType standard with NIC-based pools: VMs in an
	// availability set, each NIC's primary ipconfig in the pools.
	ConfigStandard = "standard"
)

// Configs are the configurations, the lab's default first.
var Configs = []string{ConfigNodeIP, ConfigVMSS, ConfigStandard}

// ConfigExtra is what a configuration changes in Config.CloudConfig
// (Config.Extra; a nil value leaves the key out: the CCM's default), with
// more's keys added.
func ConfigExtra(config string, more map[string]any) map[string]any {
	var out map[string]any
	switch config {
	case ConfigVMSS:
		out = map[string]any{"vmType": nil, "loadBalancerBackendPoolConfigurationType": nil}
	case ConfigStandard:
		out = map[string]any{"loadBalancerBackendPoolConfigurationType": nil}
	}
	if len(more) > 0 && out == nil {
		out = map[string]any{}
	}
	maps.Copy(out, more)
	return out
}

// Machine is a seeded node's machine: the Node's name, its InternalIP, and
// the spec.providerID the kubelet or the cloud node manager gives a node
// that is that machine.
type Machine struct {
	Node       string
	IP         netip.Addr
	ProviderID string
}

// SubnetID is the ID of the cluster's subnet, which the seeded NICs' and
// scale sets' ipconfigs name.
func (r Resources) SubnetID() string {
	return "/subscriptions/" + r.SubscriptionID + "/resourceGroups/" + r.ResourceGroup +
		"/providers/Microsoft.Network/virtualNetworks/" + r.VNet + "/subnets/" + r.Subnet
}

// SeedScaleSet seeds a Uniform scale set with one instance per entry, in no
// pool (the CCM adds them), and returns their machines: node names are the
// computer names, the prefix and the instance ID in six base-36 digits
// (azurecompute.NodeName): the CCM finds a node's scale set by its name
// minus six characters and its instance by those six
// (getNodeIdentityByNodeName, azure_vmss.go 777-838;
// getScaleSetVMInstanceID, 742-754). Provider IDs as the CCM parses them
// (vmssVMProviderIDRE, azure_vmss.go 61-63).
func SeedScaleSet(c *azurecompute.Compute, r Resources, name, prefix string, instances []azurecompute.Instance) ([]Machine, error) {
	names, err := c.SeedVMSS(azurecompute.ScaleSet{Subscription: r.SubscriptionID, ResourceGroup: r.ResourceGroup, Name: name,
		ComputerNamePrefix: prefix, SubnetID: r.SubnetID(), Instances: instances})
	if err != nil {
		return nil, err
	}
	out := make([]Machine, len(names))
	for i, n := range names {
		out[i] = Machine{Node: n, IP: instances[i].IP, ProviderID: fmt.Sprintf(
			"azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s/virtualMachines/%d",
			r.SubscriptionID, r.ResourceGroup, name, instances[i].ID)}
	}
	return out, nil
}

// SeedVM seeds a VM in an availability set, with one NIC in no pool, and
// returns its machine: the node's name is the VM's
// (mapNodeNameToVMName, azure_instances_v1.go 449-451) and its provider ID
// names the VM (providerIDRE, azure_standard.go line 52).
func SeedVM(c *azurecompute.Compute, r Resources, name string, ip netip.Addr, availabilitySet string) (Machine, error) {
	if err := c.SeedVM(azurecompute.VM{Subscription: r.SubscriptionID, ResourceGroup: r.ResourceGroup, Name: name,
		AvailabilitySet: availabilitySet, SubnetID: r.SubnetID(), IP: ip}); err != nil {
		return Machine{}, err
	}
	return Machine{Node: name, IP: ip, ProviderID: "azure:///subscriptions/" + r.SubscriptionID + "/resourceGroups/" +
		r.ResourceGroup + "/providers/Microsoft.Compute/virtualMachines/" + name}, nil
}
