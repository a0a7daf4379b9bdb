package azurecompute_test

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

const (
	sub    = "00000000-0000-0000-0000-000000000001"
	rg     = "cluster-rg"
	lbName = "kubernetes"
	pool   = "kubernetes"
	vmss   = "aks-nodepool1-vmss"
	prefix = "aks-nodepool1-"
)

var (
	subnetID = "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
	lbID     = "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/loadBalancers/" + lbName
	poolID   = lbID + "/backendAddressPools/" + pool
)

// world is the ARM emulator with the compute side attached, served over
// HTTPS, and the SDK clients the CCM uses pointed at it.
type world struct {
	emu     *azurearm.Emulator
	compute *azurecompute.Compute
	cred    azcore.TokenCredential
	opts    *arm.ClientOptions
	net     *armnetwork.ClientFactory
	cmp     *armcompute.ClientFactory
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldWith(t, azurecompute.Options{})
}

func newWorldWith(t *testing.T, o azurecompute.Options) *world {
	t.Helper()
	emu := azurearm.New(azurearm.Options{})
	c := azurecompute.New(o)
	emu.AttachCompute(c)
	served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	cred, opts, err := azurearm.Remote(served.URL, served.CAPEM, "test")
	if err != nil {
		t.Fatal(err)
	}
	nf, err := armnetwork.NewClientFactory(sub, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := armcompute.NewClientFactory(sub, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	emu.SeedSubnet(sub, rg, "vnet", "nodes", netip.MustParsePrefix("10.224.0.0/16"))
	if err := emu.Seed(sub, rg, armnetwork.LoadBalancer{Name: to.Ptr(lbName), Location: to.Ptr("westeurope"),
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"),
				Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)}}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr(pool)}},
		}}); err != nil {
		t.Fatal(err)
	}
	return &world{emu: emu, compute: c, cred: cred, opts: opts, net: nf, cmp: cf}
}

// seedVMSS seeds the scale set with instances 0..n-1, in the pool or not.
func (w *world) seedVMSS(t *testing.T, n int, inPool bool) []string {
	t.Helper()
	s := azurecompute.ScaleSet{Subscription: sub, ResourceGroup: rg, Name: vmss, ComputerNamePrefix: prefix, SubnetID: subnetID}
	if inPool {
		s.Pools = []string{poolID}
	}
	for i := range n {
		s.Instances = append(s.Instances, azurecompute.Instance{ID: uint64(i), IP: netip.AddrFrom4([4]byte{10, 224, 0, byte(10 + i)})})
	}
	names, err := w.compute.SeedVMSS(s)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// members is the pool's backendIPConfigurations as an LB GET returns them.
func (w *world) members(t *testing.T) []string {
	t.Helper()
	lb, err := w.net.NewLoadBalancersClient().Get(context.Background(), rg, lbName, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range lb.Properties.BackendAddressPools {
		if *p.Name != pool {
			continue
		}
		for _, c := range p.Properties.BackendIPConfigurations {
			out = append(out, *c.ID)
		}
	}
	slices.Sort(out)
	return out
}

func vmssIPConfig(instance string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + vmss +
		"/virtualMachines/" + instance + "/networkInterfaces/" + vmss + "/ipConfigurations/ipconfig1"
}

func nicIPConfig(vm string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/networkInterfaces/" +
		azurecompute.NICName(vm) + "/ipConfigurations/ipconfig1"
}

// status is the HTTP status of an SDK error, 0 for none.
func status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	if err != nil {
		return -1
	}
	return 0
}

func wantStatus(t *testing.T, what string, err error, want int) {
	t.Helper()
	if got := status(err); got != want {
		t.Fatalf("%s: status %d (%v), want %d", what, got, err, want)
	}
}

func netip4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }
