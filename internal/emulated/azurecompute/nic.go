package azurecompute

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// Virtual machines outside scale sets, their availability sets and their
// network interfaces; and the membership of backend pools.

// sortedKeys are a store's keys in one resource group, sorted.
func sortedKeys[T any](m map[string]T, rg string) []string {
	prefix := strings.ToLower(rg + "/")
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// listVMs lists a resource group's standalone VMs. A $filter is asked only
// for the VMs of a Flexible scale set (cloud-provider-azure's
// ListVmssFlexVMsWithOutInstanceView, pkg/provider/azure_vmssflex_cache.go);
// none is modelled, so a filtered list is empty.
func (c *Compute) listVMs(t target, expand bool, filter string) azurearm.ComputeReply {
	out := []*armcompute.VirtualMachine{}
	if filter != "" {
		return listReply(out)
	}
	for _, k := range sortedKeys(c.vms, t.rg()) {
		out = append(out, vmView(c.vms[k], expand))
	}
	return listReply(out)
}

func (c *Compute) getVM(t target, expand bool) azurearm.ComputeReply {
	vm, ok := c.vms[t.key()]
	if !ok {
		return notFound(t)
	}
	return docReply(http.StatusOK, vmView(vm, expand))
}

// vmView is a VM as a GET returns it: its instance view only with
// $expand=instanceView (REST reference, Virtual Machines - Get, $expand).
func vmView(vm *armcompute.VirtualMachine, expand bool) *armcompute.VirtualMachine {
	out := clone(vm)
	if expand {
		out.Properties.InstanceView = &armcompute.VirtualMachineInstanceView{Statuses: runningStatuses()}
	}
	return out
}

// runningStatuses are a running VM's instance-view statuses;
// cloud-provider-azure reads the power state from the status whose code
// starts with PowerState/ (pkg/consts/consts.go line 578, VMPowerStatePrefix).
func runningStatuses() []*armcompute.InstanceViewStatus {
	return []*armcompute.InstanceViewStatus{
		{Code: to.Ptr("ProvisioningState/succeeded"), Level: to.Ptr(armcompute.StatusLevelTypesInfo), DisplayStatus: to.Ptr("Provisioning succeeded")},
		{Code: to.Ptr("PowerState/running"), Level: to.Ptr(armcompute.StatusLevelTypesInfo), DisplayStatus: to.Ptr("VM running")},
	}
}

// listAvailabilitySets lists the availability sets the resource group's
// VMs name, each with its VMs (cloud-provider-azure lists them for its
// VMAS cache, pkg/provider/azure_standard.go 399-437).
func (c *Compute) listAvailabilitySets(t target) azurearm.ComputeReply {
	sets := map[string]*armcompute.AvailabilitySet{}
	var names []string
	for _, k := range sortedKeys(c.vms, t.rg()) {
		vm := c.vms[k]
		if vm.Properties.AvailabilitySet == nil {
			continue
		}
		id := *vm.Properties.AvailabilitySet.ID
		lid := strings.ToLower(id)
		as, ok := sets[lid]
		if !ok {
			as = &armcompute.AvailabilitySet{ID: to.Ptr(id), Name: to.Ptr(id[strings.LastIndex(id, "/")+1:]),
				Type: to.Ptr("Microsoft.Compute/availabilitySets"), Location: vm.Location,
				SKU:        &armcompute.SKU{Name: to.Ptr("Aligned")},
				Properties: &armcompute.AvailabilitySetProperties{PlatformFaultDomainCount: to.Ptr[int32](2), PlatformUpdateDomainCount: to.Ptr[int32](5)}}
			sets[lid] = as
			names = append(names, lid)
		}
		as.Properties.VirtualMachines = append(as.Properties.VirtualMachines, &armcompute.SubResource{ID: vm.ID})
	}
	slices.Sort(names)
	out := make([]*armcompute.AvailabilitySet, 0, len(names))
	for _, n := range names {
		out = append(out, sets[n])
	}
	return listReply(out)
}

func (c *Compute) listNICs(t target) azurearm.ComputeReply {
	var out []*armnetwork.Interface
	for _, k := range sortedKeys(c.nics, t.rg()) {
		out = append(out, c.nics[k])
	}
	return listReply(out)
}

// putNIC replaces a network interface with the PUT's body, as ARM does (a
// full document: cloud-provider-azure sends the NIC it read, with its pools
// changed, pkg/provider/azure_standard.go 909-944 and
// azure_interface_repo.go 29-45, without If-Match; ARM's network provider
// honours one when sent). What the server owns — IDs, ETag, provisioning
// state, the VM it is attached to, a dynamic address — is kept.
func (c *Compute) putNIC(t target, body []byte, ifMatch string) azurearm.ComputeReply {
	var in armnetwork.Interface
	if err := json.Unmarshal(body, &in); err != nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", err.Error())
	}
	old, ok := c.nics[t.key()]
	if !ok {
		if ifMatch != "" && ifMatch != "*" {
			return errorReply(http.StatusPreconditionFailed, "PreconditionFailed", "the network interface does not exist (If-Match: "+ifMatch+")")
		}
		return errorReply(http.StatusBadRequest, "OperationNotAllowed", "emulator: create network interfaces with SeedVM")
	}
	if r := precondition(ifMatch, *old.Etag); r != nil {
		return *r
	}
	if in.Properties == nil || len(in.Properties.IPConfigurations) == 0 {
		return errorReply(http.StatusBadRequest, "NetworkInterfaceMustHaveAtLeastOneIpConfiguration", "a network interface needs an IP configuration")
	}
	next := clone(&in)
	next.ID, next.Name, next.Type, next.Location = old.ID, old.Name, old.Type, old.Location
	next.Properties.ProvisioningState = to.Ptr(armnetwork.ProvisioningStateSucceeded)
	next.Properties.VirtualMachine = old.Properties.VirtualMachine
	prev := map[string]*armnetwork.InterfaceIPConfiguration{}
	for _, ipc := range old.Properties.IPConfigurations {
		prev[strings.ToLower(*ipc.Name)] = ipc
	}
	for _, ipc := range next.Properties.IPConfigurations {
		if ipc.Name == nil || *ipc.Name == "" {
			return errorReply(http.StatusBadRequest, "InvalidRequestFormat", "an IP configuration needs a name")
		}
		if ipc.Properties == nil {
			ipc.Properties = &armnetwork.InterfaceIPConfigurationPropertiesFormat{}
		}
		ipc.ID = to.Ptr(*old.ID + "/ipConfigurations/" + *ipc.Name)
		ipc.Properties.ProvisioningState = to.Ptr(armnetwork.ProvisioningStateSucceeded)
		if p, ok := prev[strings.ToLower(*ipc.Name)]; ok && ipc.Properties.PrivateIPAddress == nil {
			ipc.Properties.PrivateIPAddress = p.Properties.PrivateIPAddress
		}
	}
	next.Etag = to.Ptr(c.nextEtag())
	before := marshal(old)
	c.nics[t.key()] = next
	r := docReply(http.StatusOK, next)
	r.Before, r.After = before, r.Body
	return r
}

// BackendIPConfigurations implements azurearm.Compute: the ipconfigs of
// the standalone NICs and of the scale-set instances'
// networkProfileConfiguration whose loadBalancerBackendAddressPools name
// the pool (pool IDs compared case-insensitively, as cloud-provider-azure
// does with EqualFold). An instance's own configuration counts, not its
// scale set's model: a model change reaches an instance only when it is
// updated.
func (c *Compute) BackendIPConfigurations(poolID string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, nic := range c.nics {
		for _, ipc := range nic.Properties.IPConfigurations {
			for _, p := range ipc.Properties.LoadBalancerBackendAddressPools {
				if p.ID != nil && strings.EqualFold(*p.ID, poolID) {
					out = append(out, *ipc.ID)
					break
				}
			}
		}
	}
	for _, s := range c.sets {
		for _, in := range s.instances {
			for _, nic := range c.instanceNICs(in) {
				for _, ipc := range nic.Properties.IPConfigurations {
					for _, p := range ipc.Properties.LoadBalancerBackendAddressPools {
						if p.ID != nil && strings.EqualFold(*p.ID, poolID) {
							out = append(out, *ipc.ID)
							break
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
