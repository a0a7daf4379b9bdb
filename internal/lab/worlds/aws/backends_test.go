package aws

import (
	"net/netip"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/awsdp"
	"zerodrop.dev/zerodrop/internal/model"
)

func TestBackendsOf(t *testing.T) {
	target := func(ip string, s awsapi.State, receiving bool) awsdp.Target {
		return awsdp.Target{ID: "i-" + ip, Addr: netip.MustParseAddrPort(ip + ":30080"), State: s, Receiving: receiving}
	}
	for _, tc := range []struct {
		name    string
		target  awsdp.Target
		state   model.BackendState
		healthy bool
	}{
		{"healthy", target("10.0.0.1", awsapi.StateHealthy, true), model.Active, true},
		{"initial", target("10.0.0.2", awsapi.StateInitial, false), model.Active, false},
		{"unhealthy", target("10.0.0.3", awsapi.StateUnhealthy, false), model.Active, false},
		// Fail open sends traffic to an unhealthy target: it is still not up.
		{"unhealthy, failing open", target("10.0.0.4", awsapi.StateUnhealthy, true), model.Active, false},
		{"draining", target("10.0.0.5", awsapi.StateDraining, false), model.Draining, false},
	} {
		got := backendsOf([]awsdp.Target{tc.target}, "http")
		if len(got) != 1 {
			t.Fatalf("%s: %d backends", tc.name, len(got))
		}
		g := got[0]
		if g.Address != tc.target.Addr.Addr().String() || g.Port != 30080 || g.Listener != "http" ||
			g.State != tc.state || g.Healthy != tc.healthy || !g.HealthKnown {
			t.Errorf("%s: %+v, want %s healthy=%t", tc.name, g, tc.state, tc.healthy)
		}
	}
}
