package azure

import "testing"

// TestIPConfigSource: an ipconfig ID names the list its address is read
// from — a resource group's NICs, or one scale-set VM's — whatever the
// casing of its fixed segments (the SDK itself spells the scale-set NIC
// paths "microsoft.Compute"), with the names as written; anything else is
// not an ipconfig zerodrop can read.
func TestIPConfigSource(t *testing.T) {
	const s = "/subscriptions/sub/resourceGroups/RG-Nodes/providers/"
	for _, tc := range []struct {
		id   string
		want ipconfigSource
		ok   bool
	}{
		{id: s + "Microsoft.Network/networkInterfaces/vm-1-nic/ipConfigurations/ipconfig1",
			want: ipconfigSource{key: "nics/rg-nodes", rg: "RG-Nodes"}, ok: true},
		{id: "/SUBSCRIPTIONS/sub/resourcegroups/RG-Nodes/PROVIDERS/microsoft.network/NetworkInterfaces/vm-1-nic/IPConfigurations/ipconfig1",
			want: ipconfigSource{key: "nics/rg-nodes", rg: "RG-Nodes"}, ok: true},
		{id: s + "Microsoft.Compute/virtualMachineScaleSets/Pool-VMSS/virtualMachines/12/networkInterfaces/pool/ipConfigurations/ipconfig1",
			want: ipconfigSource{key: "vmss/rg-nodes/pool-vmss/12", rg: "RG-Nodes", vmss: "Pool-VMSS", instance: "12"}, ok: true},
		{id: s + "microsoft.Compute/virtualMachineScaleSets/Pool-VMSS/virtualMachines/12/networkInterfaces/pool/ipConfigurations/ipconfig1",
			want: ipconfigSource{key: "vmss/rg-nodes/pool-vmss/12", rg: "RG-Nodes", vmss: "Pool-VMSS", instance: "12"}, ok: true},
		{id: s + "Microsoft.Network/networkInterfaces/vm-1-nic"},
		{id: s + "Microsoft.Network/loadBalancers/lb/backendAddressPools/pool/ipConfigurations/x"},
		{id: s + "Microsoft.Compute/virtualMachineScaleSets/Pool-VMSS/virtualMachines/12/networkInterfaces/pool"},
		{id: ""},
	} {
		got, ok := sourceOf(tc.id)
		if ok != tc.ok || got != tc.want {
			t.Errorf("sourceOf(%q) = %+v, %v; want %+v, %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
}
