package aws

import (
	"context"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// The run's VPC: one zone, one public subnet holding the lab's node
// addresses, the cluster's tags where the CCM looks for them (ccm.SeedAWS),
// and each lab node an EC2 instance whose ID follows its index, so that a
// Node's provider ID (which cannot change once set) is the same in every
// run of the lab.
const (
	clusterID = "zerodrop-lab"
	vpcID     = "vpc-0zerodroplab"
	zone      = "us-east-1a"
	subnetID  = "subnet-0zerodroplab"
)

// labCluster is the VPC of a lab whose nodes are nodes: the subnet is the
// /24 of the first node's address (the lab's node addresses share one).
func labCluster(nodes []*netlab.Node) (ccm.AWSCluster, error) {
	if len(nodes) == 0 {
		return ccm.AWSCluster{}, fmt.Errorf("no nodes to seed as instances")
	}
	subnet := netip.PrefixFrom(nodes[0].IP, 24).Masked()
	c := ccm.AWSCluster{ClusterID: clusterID, VPC: vpcID, CIDR: subnet.String(),
		Subnets: []awsapi.Subnet{{ID: subnetID, AZ: zone, CIDR: subnet.String()}}}
	for _, n := range nodes {
		if !subnet.Contains(n.IP) {
			return ccm.AWSCluster{}, fmt.Errorf("node %d's address %s is outside the subnet %s", n.Index, n.IP, subnet)
		}
		c.Nodes = append(c.Nodes, ccm.AWSNode{Name: cluster.NodeName(n.Index), InstanceID: instanceID(n.Index),
			Zone: zone, Subnet: subnetID, IP: n.IP.String()})
	}
	return c, nil
}

// instanceID is the instance of the lab's node index i: i-, then 17 hex
// digits, as EC2's IDs are.
func instanceID(i int) string { return fmt.Sprintf("i-%017x", i) }

// setProviderIDs gives each node's Node its instance's provider ID, as the
// kubelet does on AWS (--cloud-provider=external, then the cloud node
// manager), and checks one set before is the same.
func (a *run) setProviderIDs(ctx context.Context, c ccm.AWSCluster) error {
	nodes := a.env.CP.Client.CoreV1().Nodes()
	for _, an := range c.Nodes {
		n, err := nodes.Get(ctx, an.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("provider ID of node %s: %w", an.Name, err)
		}
		switch n.Spec.ProviderID {
		case an.ProviderID():
			continue
		case "":
		default:
			return fmt.Errorf("node %s has provider ID %s, not its instance's %s", an.Name, n.Spec.ProviderID, an.ProviderID())
		}
		patch := fmt.Sprintf(`{"spec":{"providerID":%q}}`, an.ProviderID())
		if _, err := nodes.Patch(ctx, an.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("provider ID of node %s: %w", an.Name, err)
		}
	}
	return nil
}
