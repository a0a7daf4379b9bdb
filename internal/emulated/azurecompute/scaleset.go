package azurecompute

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// Uniform scale sets and their instances. Writes are long-running
// operations in ARM (VirtualMachineScaleSets_CreateOrUpdate,
// VirtualMachineScaleSetVMs_Update); here they end at once: the answer is
// 200 with the stored document in provisioningState Succeeded and no
// operation header, which azcore's poller takes as done (its body poller).

func (c *Compute) listVMSS(t target) azurearm.ComputeReply {
	var out []*armcompute.VirtualMachineScaleSet
	for _, k := range sortedKeys(c.sets, t.rg()) {
		out = append(out, c.sets[k].model)
	}
	return listReply(out)
}

func (c *Compute) instance(t target) *instance {
	s, ok := c.sets[t.key()]
	if !ok {
		return nil
	}
	return s.instances[t.names[3]]
}

func (c *Compute) listVMSSVMs(t target, expand bool) azurearm.ComputeReply {
	s, ok := c.sets[t.key()]
	if !ok {
		return notFound(t)
	}
	ids := make([]string, 0, len(s.instances))
	for id := range s.instances {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(instanceNumber(a), instanceNumber(b)) })
	out := make([]*armcompute.VirtualMachineScaleSetVM, 0, len(ids))
	for _, id := range ids {
		out = append(out, viewOf(s.instances[id], expand))
	}
	return listReply(out)
}

func instanceNumber(id string) int {
	n, _ := strconv.Atoi(id)
	return n
}

// viewOf is an instance as a GET returns it: with its instance view only
// when asked ($expand=instanceView, which cloud-provider-azure's scale-set
// cache asks for by default, pkg/provider/azure_vmss.go 840-866).
func viewOf(in *instance, expand bool) *armcompute.VirtualMachineScaleSetVM {
	vm := clone(in.vm)
	if !expand {
		vm.Properties.InstanceView = nil
	}
	return vm
}

// putVMSS merges a scale-set PUT into the model. cloud-provider-azure sends
// only location, etag and virtualMachineProfile.networkProfile
// (pkg/provider/azure_vmss.go 1349-1359); a field the body leaves out keeps
// its value. A changed network profile reaches no instance until that
// instance is updated (upgrade policy Manual): each gets
// latestModelApplied false (REST reference, VirtualMachineScaleSetVM
// properties.latestModelApplied).
func (c *Compute) putVMSS(t target, body []byte, ifMatch string) azurearm.ComputeReply {
	var in armcompute.VirtualMachineScaleSet
	if err := json.Unmarshal(body, &in); err != nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", err.Error())
	}
	s, ok := c.sets[t.key()]
	if !ok {
		if ifMatch != "" && ifMatch != "*" {
			return errorReply(http.StatusPreconditionFailed, "PreconditionFailed", "the scale set does not exist (If-Match: "+ifMatch+")")
		}
		// Creating a scale set through the API is not modelled: SeedVMSS.
		return errorReply(http.StatusBadRequest, "OperationNotAllowed", "emulator: create scale sets with SeedVMSS")
	}
	if r := precondition(ifMatch, *s.model.Etag); r != nil {
		return *r
	}
	before := marshal(s.model)
	next := clone(s.model)
	if in.Tags != nil {
		next.Tags = in.Tags
	}
	changed := false
	if in.Properties != nil && in.Properties.VirtualMachineProfile != nil && in.Properties.VirtualMachineProfile.NetworkProfile != nil {
		np := in.Properties.VirtualMachineProfile.NetworkProfile
		if r := validateNICConfigs(np.NetworkInterfaceConfigurations); r != nil {
			return *r
		}
		changed = string(marshal(np)) != string(marshal(next.Properties.VirtualMachineProfile.NetworkProfile))
		next.Properties.VirtualMachineProfile.NetworkProfile = np
	}
	next.Etag = to.Ptr(c.nextEtag())
	s.model = next
	if changed {
		for _, i := range s.instances {
			i.vm.Properties.LatestModelApplied = to.Ptr(false)
		}
	}
	r := docReply(http.StatusOK, next)
	r.Before, r.After = before, r.Body
	return r
}

// putVMSSVM merges an instance update into the stored instance.
// cloud-provider-azure sends location, etag, hardwareProfile and
// networkProfileConfiguration with If-Match (pkg/provider/azure_vmss.go
// 1180-1189 and 2427-2515); the rest of the VM keeps its value.
func (c *Compute) putVMSSVM(t target, body []byte, ifMatch string) azurearm.ComputeReply {
	var in armcompute.VirtualMachineScaleSetVM
	if err := json.Unmarshal(body, &in); err != nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", err.Error())
	}
	inst := c.instance(t)
	if inst == nil {
		if ifMatch != "" && ifMatch != "*" {
			return errorReply(http.StatusPreconditionFailed, "PreconditionFailed", "the instance does not exist (If-Match: "+ifMatch+")")
		}
		return notFound(t)
	}
	if r := precondition(ifMatch, *inst.vm.Etag); r != nil {
		return *r
	}
	before := marshal(inst.vm)
	next := clone(inst.vm)
	if in.Tags != nil {
		next.Tags = in.Tags
	}
	if p := in.Properties; p != nil {
		if p.NetworkProfileConfiguration != nil {
			if r := validateNICConfigs(p.NetworkProfileConfiguration.NetworkInterfaceConfigurations); r != nil {
				return *r
			}
			next.Properties.NetworkProfileConfiguration = p.NetworkProfileConfiguration
		}
		if p.HardwareProfile != nil {
			next.Properties.HardwareProfile = p.HardwareProfile
		}
	}
	next.Etag = to.Ptr(c.nextEtag())
	inst.vm = next
	r := docReply(http.StatusOK, viewOf(inst, false))
	r.Before, r.After = before, marshal(next)
	return r
}

// validateNICConfigs refuses network interface configurations without the
// names ARM requires (REST reference: VirtualMachineScaleSetNetworkConfiguration
// name and VirtualMachineScaleSetIPConfiguration name are required).
func validateNICConfigs(cfgs []*armcompute.VirtualMachineScaleSetNetworkConfiguration) *azurearm.ComputeReply {
	for _, n := range cfgs {
		if n == nil || n.Name == nil || *n.Name == "" || n.Properties == nil {
			r := errorReply(http.StatusBadRequest, "InvalidParameter", "a network interface configuration needs a name and properties")
			return &r
		}
		for _, ip := range n.Properties.IPConfigurations {
			if ip == nil || ip.Name == nil || *ip.Name == "" {
				r := errorReply(http.StatusBadRequest, "InvalidParameter", "an IP configuration of "+*n.Name+" needs a name")
				return &r
			}
		}
	}
	return nil
}

// instanceNICs are an instance's network interfaces as the network side
// shows them (InterfacesClient.NewListVirtualMachineScaleSetVMNetworkInterfacesPager):
// one per network interface configuration of the instance, named by it,
// with IDs under the instance's ID in the casing cloud-provider-azure's
// vmssIPConfigurationRE requires (case-sensitive, pkg/provider/azure_vmss.go
// line 59).
func (c *Compute) instanceNICs(in *instance) []*armnetwork.Interface {
	vm := in.vm
	npc := vm.Properties.NetworkProfileConfiguration
	if npc == nil {
		return nil
	}
	var out []*armnetwork.Interface
	for _, cfg := range npc.NetworkInterfaceConfigurations {
		nicID := *vm.ID + "/networkInterfaces/" + *cfg.Name
		nic := &armnetwork.Interface{ID: to.Ptr(nicID), Name: cfg.Name, Location: vm.Location, Etag: vm.Etag,
			Properties: &armnetwork.InterfacePropertiesFormat{
				Primary:           cfg.Properties.Primary,
				ProvisioningState: to.Ptr(armnetwork.ProvisioningStateSucceeded),
				VirtualMachine:    &armnetwork.SubResource{ID: vm.ID},
			}}
		for _, ipc := range cfg.Properties.IPConfigurations {
			p := &armnetwork.InterfaceIPConfigurationPropertiesFormat{
				PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
				PrivateIPAddressVersion:   to.Ptr(armnetwork.IPVersionIPv4),
			}
			if ipc.Properties != nil {
				p.Primary = ipc.Properties.Primary
				if ipc.Properties.Subnet != nil {
					p.Subnet = &armnetwork.Subnet{ID: ipc.Properties.Subnet.ID}
				}
				for _, pool := range ipc.Properties.LoadBalancerBackendAddressPools {
					p.LoadBalancerBackendAddressPools = append(p.LoadBalancerBackendAddressPools, &armnetwork.BackendAddressPool{ID: pool.ID})
				}
			}
			if isTrue(cfg.Properties.Primary) && (p.Primary == nil || *p.Primary) {
				p.PrivateIPAddress = to.Ptr(in.ip)
			}
			nic.Properties.IPConfigurations = append(nic.Properties.IPConfigurations, &armnetwork.InterfaceIPConfiguration{
				ID: to.Ptr(nicID + "/ipConfigurations/" + *ipc.Name), Name: ipc.Name, Properties: p})
		}
		out = append(out, nic)
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }
