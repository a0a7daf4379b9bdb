package install

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/testutil/ccmworld"
)

// TestChartGateOnlyWithRealCCMNICPools is TestChartGateOnlyWithRealCCM
// with the CCM's azure.json defaults, which a self-managed cluster gets
// when it leaves both keys out: vmType vmss and nodeIPConfiguration pools
// (cloud-provider-azure v1.36.3, pkg/provider/azure.go 278-281 and
// 304-307). The nodes are a scale set's two instances; the CCM puts the
// first one's ipconfig in its pool (a VMSS-VM PUT) and leaves out the
// second, labelled excluded, so the pool names ipconfigs and no address,
// and the gate opens only through zerodrop's reads of the NIC lists.
func TestChartGateOnlyWithRealCCMNICPools(t *testing.T) {
	gateOnlyWithRealCCM(t, func(t *testing.T, w *ccmworld.World) (string, string) {
		w.Base.Extra = map[string]any{"vmType": nil, "loadBalancerBackendPoolConfigurationType": nil}
		c := azurecompute.New(azurecompute.Options{Location: "westeurope"})
		w.Emu.AttachCompute(c)
		const set = "k8s-pool"
		ips := []string{"10.1.0.4", "10.1.0.9"}
		names, err := c.SeedVMSS(azurecompute.ScaleSet{Subscription: gateOnlySub, ResourceGroup: gateOnlyGroup, Name: set,
			ComputerNamePrefix: set, SubnetID: gateOnlySubnet, Instances: []azurecompute.Instance{
				{ID: 0, IP: netip.MustParseAddr(ips[0])}, {ID: 1, IP: netip.MustParseAddr(ips[1])}}})
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range names {
			var labels map[string]string
			if i == 1 {
				labels = map[string]string{corev1.LabelNodeExcludeBalancers: ""}
			}
			// The provider ID the CCM parses a scale-set instance from
			// (vmssVMProviderIDRE, pkg/provider/azure_vmss.go 61-63).
			w.NodeWithProviderID(t, name, ips[i], fmt.Sprintf("azure:///subscriptions/%s/resourceGroups/%s/providers/"+
				"Microsoft.Compute/virtualMachineScaleSets/%s/virtualMachines/%d", gateOnlySub, gateOnlyGroup, set, i), labels)
		}
		return names[0], names[1]
	})
}
