package azure

import "time"

// SetIPConfigAges shortens how soon the NIC lists of NIC-based pools are
// read again on a miss, and how long they are believed (nicpools.go).
func SetIPConfigAges(p *Provider, miss, max time.Duration) {
	p.ipconfigs.mu.Lock()
	defer p.ipconfigs.mu.Unlock()
	p.ipconfigs.missAge, p.ipconfigs.maxAge = miss, max
}
