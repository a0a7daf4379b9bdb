package azure

import (
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.Settler = (*Provider)(nil)

// settleIntervals is how many probe intervals of a rule the termination
// gate waits after ARM reports a backend's removal applied. ARM answers a
// write once it is provisioned; the load balancer's hosts take the change
// on asynchronously, and nothing ARM answers says when (provisioningState
// Succeeded does not). A probe interval is the time scale on which Azure
// itself acts on a backend's state; one interval was not enough in the
// lab: with the hidden propagation swept to exactly one interval (5 s) a
// rollout lost requests (docs/azure.md), so the settle is two, and the
// published bound promises nothing from a propagation of two intervals.
const settleIntervals = 2

// settle is the termination settle of a rule whose probe runs every
// seconds, as Azure runs it (whole seconds, at least five).
func settle(seconds int32) time.Duration {
	return settleIntervals * time.Duration(max(seconds, minProbeInterval)) * time.Second
}

// RemovalSettle implements provider.Settler: after a backend's removal has
// been applied, the termination gate still waits settle of the rule's probe
// interval. Without the rule in the last document read (the Service went),
// the shortest interval Azure runs is used.
func (p *Provider) RemovalSettle(key, listener string) time.Duration {
	seconds := int32(minProbeInterval)
	rule, err := ruleName(listener)
	if err != nil {
		return settle(seconds)
	}
	p.mu.Lock()
	raw := p.observed[key]
	p.mu.Unlock()
	c := index(raw)
	for _, r := range c.rules {
		if !strings.EqualFold(str(r.Name), rule) || r.Properties == nil {
			continue
		}
		if pr := c.probes[refName(r.Properties.Probe)]; pr != nil && pr.Properties != nil {
			seconds = max(seconds, deref(pr.Properties.IntervalInSeconds))
		}
	}
	return settle(seconds)
}
