package azuredp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
)

// startWith starts a data plane with the tests' configuration changed by
// set; it is closed at the test's end.
func (w *world) startWith(t *testing.T, set func(*Config)) *DataPlane {
	t.Helper()
	cfg := Config{NS: w.lb.Netns, Emulator: w.emu, ResourceGroup: rg, ProbeScale: 0.2, Logf: t.Logf}
	set(&cfg)
	dp, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("data plane close: %v", err)
		}
	})
	return dp
}

// A NIC-based pool (the CCM's default, nodeIPConfiguration): the pool
// document lists no address, its members are the ipconfigs that name it —
// a standalone VM's NIC (b1) and a scale-set instance's (b2) — which the
// data plane resolves through the compute side to the addresses it
// forwards to. Both rules carry traffic to both, and rule health names
// each member by its ipconfig, as ARM does for such a pool.
func TestNICPool(t *testing.T) {
	w := newWorld(t)
	b1, b2 := w.backends[0], w.backends[1]
	c := azurecompute.New(azurecompute.Options{})
	w.emu.AttachCompute(c)
	poolID := "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/loadBalancers/" + lbName + "/backendAddressPools/pool"
	if err := c.SeedVM(azurecompute.VM{Subscription: sub, ResourceGroup: rg, Name: "vm-b1", SubnetID: subnet, IP: b1.host.IP,
		Pools: []string{poolID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SeedVMSS(azurecompute.ScaleSet{Subscription: sub, ResourceGroup: rg, Name: "vmss", ComputerNamePrefix: "vmss",
		SubnetID: subnet, Pools: []string{poolID}, Instances: []azurecompute.Instance{{ID: 0, IP: b2.host.IP}}}); err != nil {
		t.Fatal(err)
	}
	w.putLB(t, w.lbDoc(nil, nil))
	dp := w.startWith(t, func(c2 *Config) { c2.Compute = c })
	w.waitEligible(t, dp, "fip", "b1", "b2")
	w.waitEligible(t, dp, "nat", "b1", "b2")
	for _, x := range []struct {
		rule string
		port int
	}{{"fip", fipPort}, {"nat", natPort}} {
		cli := w.fipCli
		if x.rule == "nat" {
			cli = w.natCli
		}
		if got := spread(t, cli, x.port, 20); got[""] > 0 || got["b1"] == 0 || got["b2"] == 0 || got["b3"] > 0 {
			t.Errorf("%s: 20 new connections answered by %v, want every one answered, by b1 and b2 only", x.rule, got)
		}
	}
	hs, err := dp.RuleHealth(rg, lbName, "fip")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, strings.ToLower(h.IPConfigurationID))
		if h.IPAddress != "" {
			t.Errorf("rule health of %s names an address (%s): a NIC-based pool's member is named by its ipconfig", h.IPConfigurationID, h.IPAddress)
		}
		if h.State != "Up" {
			t.Errorf("rule health of %s (%s): %s, want Up", h.IPAddress, h.IPConfigurationID, h.State)
		}
	}
	slices.Sort(ids)
	want := []string{
		strings.ToLower("/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/0/networkInterfaces/vmss/ipConfigurations/ipconfig1"),
		strings.ToLower("/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/networkInterfaces/" + azurecompute.NICName("vm-b1") + "/ipConfigurations/ipconfig1"),
	}
	if !slices.Equal(ids, want) {
		t.Errorf("rule health names ipconfigs %v, want %v", ids, want)
	}
}

// An established connection whose backend leaves the pool (b2 taken out
// of the pool, nothing else changed), with floating IP and without:
// under PoolFlowsKeep it is still answered by b2; under PoolFlowsReset its
// next request is answered with a reset — not a hang — and new
// connections go to the pool's other members.
func TestPoolFlows(t *testing.T) {
	w := newWorld(t)
	b1, b3 := w.backends[0], w.backends[2]
	for _, mode := range PoolFlowOptions {
		t.Run(mode, func(t *testing.T) {
			w.putLB(t, w.lbDoc(w.backends, nil))
			dp := w.startWith(t, func(c *Config) { c.PoolFlows = mode })
			defer dp.Close()
			w.waitEligible(t, dp, "fip", "b1", "b2", "b3")
			w.waitEligible(t, dp, "nat", "b1", "b2", "b3")
			openF, openN := connTo(t, w.fipCli, fipPort, "b2"), connTo(t, w.natCli, natPort, "b2")
			defer openF.Close()
			defer openN.Close()
			w.putPool(t, []*server{b1, b3}, nil)
			w.waitEligible(t, dp, "fip", "b1", "b3")
			w.waitEligible(t, dp, "nat", "b1", "b3")
			for _, x := range []struct {
				rule string
				c    *conn
			}{{"fip", openF}, {"nat", openN}} {
				line, err := x.c.Get()
				switch mode {
				case PoolFlowsKeep:
					if err != nil || !strings.HasPrefix(line, "b2 ") {
						t.Errorf("%s, keep: the connection open on b2 after b2 left the pool: %q, %v; want it still answered by b2", x.rule, line, err)
					}
				case PoolFlowsReset:
					if !errors.Is(err, syscall.ECONNRESET) {
						t.Errorf("%s, reset: the connection open on b2 after b2 left the pool: %q, %v; want a connection reset", x.rule, line, err)
					}
					// The reset flow is forgotten: its 4-tuple again is a
					// new flow to the pool's members (conntrack.go).
					cli, port := w.fipCli, fipPort
					if x.rule == "nat" {
						cli, port = w.natCli, natPort
					}
					again, err := dialFrom(cli, x.c.LocalPort(), port)
					if err != nil {
						t.Errorf("%s, reset: a new connection from the reset one's source port: %v; want it answered by b1 or b3", x.rule, err)
						break
					}
					line, err = again.Get()
					again.Close()
					if err != nil || strings.HasPrefix(line, "b2 ") {
						t.Errorf("%s, reset: a new connection from the reset one's source port answered %q, %v; want b1 or b3", x.rule, line, err)
					}
				}
			}
			if got := spread(t, w.fipCli, fipPort, 20); got[""] > 0 || got["b2"] > 0 {
				t.Errorf("fip: after b2 left the pool, 20 new connections answered by %v, want every one answered, none by b2", got)
			}
		})
	}
}
