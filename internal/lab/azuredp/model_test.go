package azuredp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// TestHealthThreshold: probeThreshold failures in a row take a backend out
// and as many successes put it back; a backend never up goes up on its
// first success; one failure between successes resets the count.
func TestHealthThreshold(t *testing.T) {
	var h health
	steps := []struct {
		ok     bool
		wantUp bool
	}{
		{false, false}, {true, true}, // first success after "boot": up at once
		{false, true}, {true, true}, {false, true}, {false, true}, {false, false}, // 3 failures in a row
		{true, false}, {true, false}, {false, false}, {true, false}, {true, false}, {true, true}, // 3 successes in a row
	}
	for i, s := range steps {
		h.observe(s.ok, "", 3)
		if h.up != s.wantUp {
			t.Fatalf("step %d (ok=%t): up=%t, want %t", i, s.ok, h.up, s.wantUp)
		}
	}
}

// TestModel reads a document as cloud-provider-azure writes one, with ARM's
// defaults, and says what it does not program.
func TestModel(t *testing.T) {
	w := &world{}
	doc := w.lbDocFor([]string{"10.0.0.2", "10.0.0.1"}, map[string]armnetwork.LoadBalancerBackendAddressAdminState{
		"10.0.0.2": armnetwork.LoadBalancerBackendAddressAdminStateDown})
	doc.Name = to.Ptr(lbName)
	p := doc.Properties
	p.Probes[0].Properties.ProbeThreshold = nil
	p.Probes[0].Properties.NumberOfProbes = to.Ptr[int32](2)
	p.Probes[0].Properties.IntervalInSeconds = nil
	p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr("udp"),
		Properties: &armnetwork.LoadBalancingRulePropertiesFormat{Protocol: to.Ptr(armnetwork.TransportProtocolUDP), FrontendPort: to.Ptr[int32](53)}})
	m := buildModel([]*armnetwork.LoadBalancer{&doc}, nil, 1)
	if len(m.rules) != 2 || m.rules[0].Name != "fip" || !m.rules[0].Floating || m.rules[1].Floating || m.rules[1].BackendPort != natBackendPort {
		t.Fatalf("rules %+v, want fip (floating) and nat (to %d)", m.rules, natBackendPort)
	}
	if len(m.skipped) != 1 || !strings.Contains(m.skipped[0], "udp") {
		t.Errorf("skipped %q, want the UDP rule", m.skipped)
	}
	spec := m.probes[m.rules[0].probeKey()]
	if spec.Threshold != 2 || spec.Interval != 15*time.Second || spec.timeout() != 15*time.Second || spec.Path != "/healthz" {
		t.Errorf("probe %+v, want numberOfProbes 2 as the threshold, ARM's 15 s interval and timeout, path /healthz", spec)
	}
	a1, a2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if got := m.rules[0].Backends; len(got) != 2 || got[0].Addr != a1 || got[1].Admin != adminDown {
		t.Errorf("backends %+v, want 10.0.0.1, then 10.0.0.2 admin Down", got)
	}
	if n := len(m.targets()); n != 2 {
		t.Errorf("%d probe targets, want 2 (one probe, two addresses)", n)
	}

	up := map[netip.Addr]bool{}
	isUp := func(tg target) bool { return up[tg.addr] }
	r := m.rules[0]
	if got := m.eligible(r, isUp); len(got) != 0 {
		t.Errorf("nothing probed up: eligible %v, want none (AllProbedDown)", got)
	}
	up[a1], up[a2] = true, true
	if got := m.eligible(r, isUp); !slices.Equal(got, []netip.Addr{a1}) {
		t.Errorf("both up, 10.0.0.2 admin Down: eligible %v, want 10.0.0.1", got)
	}
	up[a1] = false
	m.probes[r.probeKey()] = probeSpec{AllProbedUp: true}
	if got := m.eligible(r, isUp); !slices.Equal(got, []netip.Addr{a1}) {
		t.Errorf("AllProbedUp with every probe down: eligible %v, want every address but admin Down ones", got)
	}
	r.Backends[0].Admin = adminUp
	m.probes[r.probeKey()] = probeSpec{}
	if got := m.eligible(r, isUp); !slices.Equal(got, []netip.Addr{a1}) {
		t.Errorf("admin Up with its probe down: eligible %v, want it", got)
	}
	r.Probe = ""
	if got := m.eligible(r, isUp); len(got) != 2 {
		t.Errorf("a rule without a probe: eligible %v, want every address (admin state has no effect)", got)
	}
}

// lbDocFor is lbDoc with bare addresses instead of hosts.
func (w *world) lbDocFor(addrs []string, admin map[string]armnetwork.LoadBalancerBackendAddressAdminState) armnetwork.LoadBalancer {
	doc := w.lbDoc(nil, nil)
	pool := doc.Properties.BackendAddressPools[0]
	for _, a := range addrs {
		props := &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr(a)}
		if s, ok := admin[a]; ok {
			props.AdminState = to.Ptr(s)
		}
		pool.Properties.LoadBalancerBackendAddresses = append(pool.Properties.LoadBalancerBackendAddresses,
			&armnetwork.LoadBalancerBackendAddress{Name: to.Ptr(a), Properties: props})
	}
	return doc
}
