package azure

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Gate-only Services (model.AnnotationGateOnly): another controller — the
// real cloud-provider-azure cloud-controller-manager — writes their load
// balancer, and the gates read it here, never writing: nothing in this file
// calls anything but GET and the rule-health operation. The load balancers
// read are Options.GateOnlyLoadBalancers, in the provider's resource group.
// A rule is found by its frontend (the Service's ingress address, the
// Service port and protocol), not by the name the other controller gave it
// (cloud-provider-azure's "a<uid>-TCP-<port>" is its business). Each
// document is read at most once per BackendsMaxAge, as Backends', and only
// the last one ARM reported Succeeded is believed (applied.go). A NIC-based
// pool (the CCM's default, nodeIPConfiguration) names ipconfigs, not
// addresses: they are read back to addresses through the NIC lists, also
// GETs (nicpools.go). See docs/azure.md, "Gate-only Services".

var _ provider.ForeignReader = (*Provider)(nil)

// ForeignRule implements provider.ForeignReader. Only frontends with a
// private address are matched (internal load balancers); a public
// frontend, which names a public IP resource, is not read yet.
func (p *Provider) ForeignRule(ctx context.Context, frontend string, port int32, proto model.Protocol) (*provider.ForeignRule, error) {
	want := model.CanonicalIP(frontend)
	for _, lb := range p.opts.GateOnlyLoadBalancers {
		raw, err := p.foreignDoc(ctx, lb)
		if err != nil {
			return nil, fmt.Errorf("read load balancer %s for gate-only Services: %w", lb, err)
		}
		c := index(raw)
		for _, r := range c.rules {
			rp := r.Properties
			if rp == nil || deref(rp.FrontendPort) != port || fromTransport(rp.Protocol) != proto {
				continue
			}
			fe := c.frontends[refName(rp.FrontendIPConfiguration)]
			if fe == nil || fe.Properties == nil || model.CanonicalIP(str(fe.Properties.PrivateIPAddress)) != want {
				continue
			}
			return p.foreignRule(ctx, lb, c, r)
		}
	}
	return nil, nil
}

// foreignDoc is the last applied document of a load balancer another
// controller writes, read again when older than BackendsMaxAge; nil when
// it does not exist (yet).
func (p *Provider) foreignDoc(ctx context.Context, lb string) (*armnetwork.LoadBalancer, error) {
	raw := p.fresh(lb)
	if raw == nil {
		var err error
		if raw, err = p.get(ctx, lb); err != nil {
			return nil, err
		}
		p.remember(lb, raw)
		if raw == nil {
			return nil, nil
		}
	}
	return p.applied(lb, raw)
}

// foreignRule reads rule r of load balancer lb: its pools' addresses (on
// the rule's backend port), its probe, and the rule health known of each.
// A pool's addresses are its own (nodeIP pools) or, for a NIC-based pool,
// those of the ipconfigs it names (nicpools.go).
func (p *Provider) foreignRule(ctx context.Context, lb string, c children, r *armnetwork.LoadBalancingRule) (*provider.ForeignRule, error) {
	rp := r.Properties
	out := &provider.ForeignRule{LB: lb, Rule: str(r.Name), FloatingIP: rp.EnableFloatingIP != nil && *rp.EnableFloatingIP,
		Settle: settle(minProbeInterval)}
	backendPort := deref(rp.BackendPort)
	if pr := c.probes[refName(rp.Probe)]; pr != nil {
		out.Probe = fromProbe(pr, backendPort)
		if pr.Properties != nil {
			out.Settle = settle(deref(pr.Properties.IntervalInSeconds))
		}
	}
	// A rule names one pool, or several (BackendAddressPools); each address
	// once, whichever pools hold it.
	refs := append([]*armnetwork.SubResource{rp.BackendAddressPool}, rp.BackendAddressPools...)
	seen := map[string]bool{}
	listener := lb + "/" + out.Rule
	for _, ref := range refs {
		name := refName(ref)
		pool := c.pools[name]
		if name == "" || seen[name] || pool == nil {
			continue
		}
		seen[name] = true
		for _, b := range fromPool(pool, backendPort) {
			out.Backends = append(out.Backends, provider.BackendStatus{Listener: listener, Address: b.Address, Port: b.Port,
				State: b.State, Connections: -1})
		}
		ids := poolIPConfigs(pool)
		if len(ids) == 0 {
			continue
		}
		addrs, err := p.resolveIPConfigs(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("pool %s of rule %s: %w", str(pool.Name), listener, err)
		}
		for _, id := range ids {
			// A NIC's ipconfig has no admin state: it is in the pool, active.
			out.Backends = append(out.Backends, provider.BackendStatus{Listener: listener,
				Address: addrs[strings.ToLower(id)], Port: backendPort, State: model.Active, Connections: -1})
		}
	}
	if p.opts.RuleHealth && len(out.Backends) > 0 {
		now := time.Now()
		p.mu.Lock()
		for i := range out.Backends {
			p.fillHealth(lb, out.Rule, &out.Backends[i], now)
		}
		p.mu.Unlock()
	}
	return out, nil
}
