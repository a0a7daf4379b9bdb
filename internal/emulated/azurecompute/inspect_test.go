package azurecompute_test

import (
	"net/netip"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// Every member a pool's backendIPConfigurations can name — a standalone
// NIC's ipconfig and a scale-set instance's — resolves to the address the
// data plane forwards to, whatever the casing of the ID.
func TestIPConfigAddresses(t *testing.T) {
	w := newWorld(t)
	w.seedVMSS(t, 2, true)
	if err := w.compute.SeedVM(azurecompute.VM{Subscription: sub, ResourceGroup: rg, Name: "vm-a", AvailabilitySet: "as",
		SubnetID: subnetID, IP: netip4(10, 224, 1, 4), Pools: []string{poolID}}); err != nil {
		t.Fatal(err)
	}
	got := w.compute.IPConfigAddresses()
	for id, want := range map[string]netip.Addr{
		nicIPConfig("vm-a"): netip4(10, 224, 1, 4), vmssIPConfig("0"): netip4(10, 224, 0, 10), vmssIPConfig("1"): netip4(10, 224, 0, 11),
	} {
		if a := got[strings.ToLower(id)]; a != want {
			t.Errorf("%s: address %v, want %v", id, a, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d ipconfigs resolved (%v), want 3", len(got), got)
	}
}
