package provider_test

import (
	"testing"

	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestProbeDecidesLocal: Azure, whose writes are slower than its probe's
// fall count, leaves a Local Service's nodes to the probe; HAProxy, whose
// runtime-API writes are faster, drains them itself (and so does the
// recording provider the controller tests use).
func TestProbeDecidesLocal(t *testing.T) {
	for _, c := range []struct {
		name string
		p    provider.Provider
		want bool
	}{
		{"azure", &azure.Provider{}, true},
		{"haproxy", &haproxy.Provider{}, false},
		{"memory", memory.New(provider.Hooks{}), false},
	} {
		if got := provider.ProbeDecidesLocal(c.p); got != c.want {
			t.Errorf("%s: ProbeDecidesLocal = %v, want %v", c.name, got, c.want)
		}
	}
}
