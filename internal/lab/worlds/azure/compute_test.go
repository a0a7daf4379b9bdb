package azure

import (
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/azuredp"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
)

// TestNodeNamesFitScaleSet: every lab node's name is the computer name of
// the nodes' scale set's instance of its index, which is how the CCM
// finds a node's instance (with lab-node-N it would skip every node, and
// --azure-ccm-config vmss would run with empty pools).
func TestNodeNamesFitScaleSet(t *testing.T) {
	for i := 1; i <= 40; i++ {
		if got, want := cluster.NodeName(i), azurecompute.NodeName(labComputerPrefix, uint64(i)); got != want {
			t.Fatalf("node %d is named %s; the scale set's instance %d is %s", i, got, i, want)
		}
	}
}

// TestVariantNamesNewOptionsOffDefault: the CCM's configuration and the
// pool flows are named in a run's variant only when not the default, so
// every earlier run's variant stands.
func TestVariantNamesNewOptionsOffDefault(t *testing.T) {
	base := New(Options{ARMLatency: DefaultARMLatency}).Variant()
	for _, o := range []Options{
		{ARMLatency: DefaultARMLatency, CCMConfig: ccm.ConfigNodeIP, PoolFlows: azuredp.PoolFlowsKeep},
	} {
		if got := New(o).Variant(); got != base {
			t.Errorf("defaults spelled out: variant %q, want %q", got, base)
		}
	}
	v := New(Options{ARMLatency: DefaultARMLatency, CCMConfig: ccm.ConfigVMSS, PoolFlows: azuredp.PoolFlowsReset}).Variant()
	if !strings.HasPrefix(v, base) || !strings.Contains(v, "CCM configuration vmss") || !strings.Contains(v, "leaves a pool reset") {
		t.Errorf("variant %q: want %q with the CCM configuration and the pool flows named", v, base)
	}
}
