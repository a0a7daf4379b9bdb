package azure

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// While a write's long-running operation runs, ARM already returns the new
// document, in provisioningState Updating (and Failed when the operation
// failed): what it shows is asked for, not applied. The gates must not take
// an address's admin state Down — or a new address — from such a document:
// a termination gate would open while the load balancer may still send the
// pod new connections, a readiness gate while it does not send it any yet.
// So Backends answers from the last document read in provisioningState
// Succeeded — the load balancer as ARM promises it is applied — and, with
// none known yet, fails: the gates then wait and ask again. Observe and
// Apply are unaffected: they plan against, and write over, what ARM holds.

// settledState reports whether ARM holds the document as applied.
func settledState(raw *armnetwork.LoadBalancer) bool {
	if raw == nil || raw.Properties == nil || raw.Properties.ProvisioningState == nil {
		return true // nothing says otherwise (the emulator without latency, a doc built by hand)
	}
	return *raw.Properties.ProvisioningState == armnetwork.ProvisioningStateSucceeded
}

// applied is what the gates may read of key: raw when it is settled, else
// the last settled document read. p.mu is not held.
func (p *Provider) applied(key string, raw *armnetwork.LoadBalancer) (*armnetwork.LoadBalancer, error) {
	if settledState(raw) {
		return raw, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.settled[key]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("load balancer %s is %s: a write is not applied yet, and no applied state of it has been read",
		key, *raw.Properties.ProvisioningState)
}
