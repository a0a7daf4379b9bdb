package azure

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
)

// The CCM's configuration (Options.CCMConfig): with ccm.ConfigNodeIP (the
// default) the emulator has no compute side and the nodes are addresses in
// the pools; with ccm.ConfigVMSS and ccm.ConfigStandard each lab node is a
// machine of the emulator's compute side — a scale-set instance, or a VM
// in an availability set — seeded as TestRealCCM seeds them (package ccm),
// its Node given the machine's provider ID, and the pools are NIC-based:
// the data plane resolves their members through the compute side.

// Scale-set names of the lab's nodes: the instances' computer names are
// the prefix and six base-36 digits of the instance ID, so that the CCM
// finds a node's instance by its name (ccm.SeedScaleSet).
const (
	labScaleSet       = "lab-node"
	labComputerPrefix = "lab-node-"
)

// seedCompute attaches a compute side to the run's emulator and seeds the
// lab's nodes as the configuration's machines; nil for ConfigNodeIP.
func (a *run) seedCompute(ctx context.Context) (*azurecompute.Compute, error) {
	o := a.w.opts
	if o.CCMConfig == "" || o.CCMConfig == ccm.ConfigNodeIP {
		return nil, nil
	}
	if o.CCMConfig == ccm.ConfigVMSS && o.CCMLoadBalancers == CCMMultipleLBs {
		// That layout names availability sets as the load balancers'
		// primary VM sets (ccmCloudConfig).
		return nil, fmt.Errorf("CCM configuration %s: not with the %s load-balancer layout", o.CCMConfig, CCMMultipleLBs)
	}
	c := azurecompute.New(azurecompute.Options{Location: azLocation, WriteLatency: o.ARMLatency})
	a.emu.AttachCompute(c)
	nodes := a.env.Net.Net.Nodes
	var machines []ccm.Machine
	switch o.CCMConfig {
	case ccm.ConfigVMSS:
		var instances []azurecompute.Instance
		for _, n := range nodes {
			instances = append(instances, azurecompute.Instance{ID: uint64(n.Index), IP: n.IP})
		}
		var err error
		if machines, err = ccm.SeedScaleSet(c, ccmResources, labScaleSet, labComputerPrefix, instances); err != nil {
			return nil, fmt.Errorf("seed the nodes' scale set: %w", err)
		}
	case ccm.ConfigStandard:
		for _, n := range nodes {
			m, err := ccm.SeedVM(c, ccmResources, cluster.NodeName(n.Index), n.IP, availabilitySet(o.CCMLoadBalancers, n.Index))
			if err != nil {
				return nil, fmt.Errorf("seed node %d's VM: %w", n.Index, err)
			}
			machines = append(machines, m)
		}
	default:
		return nil, fmt.Errorf("CCM configuration %q: want one of %v", o.CCMConfig, ccm.Configs)
	}
	for i, m := range machines {
		if want := cluster.NodeName(nodes[i].Index); m.Node != want {
			// The CCM would silently skip the node (it finds no instance
			// of that name): a run without pool members, not a finding.
			return nil, fmt.Errorf("node %s: its machine's computer name is %s: the lab's node names do not fit the %s configuration", want, m.Node, o.CCMConfig)
		}
		if err := a.setProviderID(ctx, m); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// availabilitySet is a node's availability set: as-1, or with the
// multiple-load-balancer layout as-2 from the third node on, as seedLayout
// places them.
func availabilitySet(layout string, index int) string {
	if layout == CCMMultipleLBs && index > 2 {
		return "as-2"
	}
	return "as-1"
}

// setProviderID gives the machine's Node its provider ID, as the kubelet
// or the cloud node manager does on Azure. The Nodes outlive the run; a
// provider ID once set cannot change (the API server refuses it), which a
// later run of the same configuration does not need.
func (a *run) setProviderID(ctx context.Context, m ccm.Machine) error {
	nodes := a.env.CP.Client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, m.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("provider ID of node %s: %w", m.Node, err)
	}
	if n.Spec.ProviderID == m.ProviderID {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"providerID":%q}}`, m.ProviderID)
	if _, err := nodes.Patch(ctx, m.Node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("provider ID of node %s: %w", m.Node, err)
	}
	return nil
}
