package azurecompute_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// With a write latency, a scale-set VM update is an operation the SDK
// polls: the instance reads Updating until it ends, the poller returns no
// sooner than the latency, and the instance then reads Succeeded.
func TestWriteLatency(t *testing.T) {
	const latency = 300 * time.Millisecond
	w := newWorldWith(t, azurecompute.Options{WriteLatency: latency})
	ctx := context.Background()
	w.seedVMSS(t, 1, false)
	vms := w.cmp.NewVirtualMachineScaleSetVMsClient()
	vm, err := vms.Get(ctx, rg, vmss, "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := vm.Properties.NetworkProfileConfiguration
	ipc := cfg.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0]
	ipc.Properties.LoadBalancerBackendAddressPools = []*armcompute.SubResource{{ID: to.Ptr(poolID)}}
	start := time.Now()
	p, err := vms.BeginUpdate(ctx, rg, vmss, "0", armcompute.VirtualMachineScaleSetVM{Location: vm.Location, Etag: vm.Etag,
		Properties: &armcompute.VirtualMachineScaleSetVMProperties{NetworkProfileConfiguration: cfg}},
		&armcompute.VirtualMachineScaleSetVMsClientBeginUpdateOptions{IfMatch: vm.Etag})
	if err != nil {
		t.Fatal(err)
	}
	during, err := vms.Get(ctx, rg, vmss, "0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := *during.Properties.ProvisioningState; got != "Updating" {
		t.Fatalf("provisioningState while the update runs: %s", got)
	}
	// The change is stored when the write is accepted, as in the ARM
	// emulator: the pool holds the instance at once.
	if got, want := w.members(t), []string{vmssIPConfig("0")}; !slices.Equal(got, want) {
		t.Fatalf("pool members while the update runs: %v, want %v", got, want)
	}
	res, err := p.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < latency {
		t.Fatalf("the update ended after %v, before its latency %v", took, latency)
	}
	if got := *res.Properties.ProvisioningState; got != "Succeeded" {
		t.Fatalf("provisioningState after the update: %s", got)
	}
	if c := w.emu.Counters(); c.Polls == 0 {
		t.Fatalf("no poll counted: %+v", c)
	}
}
