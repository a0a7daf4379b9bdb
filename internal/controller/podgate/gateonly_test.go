package podgate

import (
	"testing"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
)

// TestGateOnlyVerdict: a gate-only Service's target (another controller
// writes the load balancer; the backend is the pod's node) is served once
// the node is in the rule's pool and active, as read back; with Local and
// a ready sibling on the node, only once its probe is read Up too; without
// a sibling (the probe waits for this pod's Ready: a cycle) and with
// Cluster, the probe is not waited for.
func TestGateOnlyVerdict(t *testing.T) {
	node := func(registered bool, state model.BackendState, healthy, local, sibling bool) lbtarget.Target {
		return lbtarget.Target{GateOnly: true, Node: true, Registered: registered, State: state, Healthy: healthy,
			NodeOnly: local, ReadySibling: sibling, LastLocal: local && !sibling}
	}
	for _, tc := range []struct {
		name   string
		t      lbtarget.Target
		served bool
	}{
		{"not in the pool", node(false, "", false, true, false), false},
		{"admin Down", node(true, model.Draining, true, false, false), false},
		{"Local, ready sibling, probe not Up", node(true, model.Active, false, true, true), false},
		{"Local, ready sibling, probe Up", node(true, model.Active, true, true, true), true},
		{"Local, first on its node, probe not Up", node(true, model.Active, false, true, false), true},
		{"Cluster, in the pool, probe not Up", node(true, model.Active, false, false, false), true},
	} {
		if served, _, _ := verdict([]lbtarget.Target{tc.t}); served != tc.served {
			t.Errorf("%s: served %v, want %v", tc.name, served, tc.served)
		}
	}
}
