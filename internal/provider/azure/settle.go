package azure

import (
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.Settler = (*Provider)(nil)

// RemovalSettle implements provider.Settler: after a backend's removal has
// been applied, the termination gate still waits one probe interval of its
// rule, as Azure runs it (whole seconds, at least five). ARM answers a
// write once it is provisioned; the load balancer's hosts take the change
// on asynchronously, and a probe interval is the time scale on which Azure
// itself acts on a backend's state. Without the rule in the last document
// read (the Service went), the shortest interval Azure runs is used.
func (p *Provider) RemovalSettle(key, listener string) time.Duration {
	seconds := int32(minProbeInterval)
	rule, err := ruleName(listener)
	if err != nil {
		return time.Duration(seconds) * time.Second
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
	return time.Duration(seconds) * time.Second
}
