package azurecompute

import (
	"net/netip"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// What a test reads back without going through ARM (no call in the
// emulator's record): copies of the stored documents.

// ScaleSet returns a copy of a scale set's model.
func (c *Compute) ScaleSet(resourceGroup, name string) (*armcompute.VirtualMachineScaleSet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sets[key(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(s.model), true
}

// ScaleSetVM returns a copy of a scale-set instance, as a GET without
// $expand returns it.
func (c *Compute) ScaleSetVM(resourceGroup, set, instanceID string) (*armcompute.VirtualMachineScaleSetVM, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sets[key(resourceGroup, set)]
	if !ok {
		return nil, false
	}
	in, ok := s.instances[instanceID]
	if !ok {
		return nil, false
	}
	return clone(viewOf(in, false)), true
}

// NIC returns a copy of a standalone network interface.
func (c *Compute) NIC(resourceGroup, name string) (*armnetwork.Interface, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nics[key(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(n), true
}

// PrimaryPools lists the backend pool IDs of the primary ipconfig of the
// primary configuration of a scale set's network profile (its model's or
// an instance's networkProfileConfiguration), lower-cased and in order.
func PrimaryPools(cfgs []*armcompute.VirtualMachineScaleSetNetworkConfiguration) []string {
	var out []string
	for _, cfg := range cfgs {
		if cfg.Properties == nil || !isTrue(cfg.Properties.Primary) {
			continue
		}
		for _, ipc := range cfg.Properties.IPConfigurations {
			if ipc.Properties == nil || !isTrue(ipc.Properties.Primary) {
				continue
			}
			for _, p := range ipc.Properties.LoadBalancerBackendAddressPools {
				if p.ID != nil {
					out = append(out, strings.ToLower(*p.ID))
				}
			}
		}
	}
	return out
}

// NICPools lists the backend pool IDs of a network interface's primary
// ipconfig, lower-cased and in order.
func NICPools(nic *armnetwork.Interface) []string {
	var out []string
	if nic == nil || nic.Properties == nil {
		return nil
	}
	for _, ipc := range nic.Properties.IPConfigurations {
		if ipc.Properties == nil || !isTrue(ipc.Properties.Primary) {
			continue
		}
		for _, p := range ipc.Properties.LoadBalancerBackendAddressPools {
			if p.ID != nil {
				out = append(out, strings.ToLower(*p.ID))
			}
		}
	}
	return out
}

// IPConfigAddresses maps the ID of every ipconfig the compute side holds
// (standalone NICs' and scale-set instances'), lower-cased, to its private
// address: what a NIC-based pool's backendIPConfigurations name, resolved
// to where its packets go (the lab's data plane forwards to it). An
// ipconfig without an address (a scale-set instance's secondary one) is
// left out.
func (c *Compute) IPConfigAddresses() map[string]netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]netip.Addr{}
	add := func(nic *armnetwork.Interface) {
		for _, ipc := range nic.Properties.IPConfigurations {
			if ipc.ID == nil || ipc.Properties == nil || ipc.Properties.PrivateIPAddress == nil {
				continue
			}
			if a, err := netip.ParseAddr(*ipc.Properties.PrivateIPAddress); err == nil {
				out[strings.ToLower(*ipc.ID)] = a
			}
		}
	}
	for _, nic := range c.nics {
		add(nic)
	}
	for _, s := range c.sets {
		for _, in := range s.instances {
			for _, nic := range c.instanceNICs(in) {
				add(nic)
			}
		}
	}
	return out
}
