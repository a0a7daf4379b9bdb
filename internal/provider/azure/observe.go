package azure

import (
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// children indexes a load balancer's children by lower-case name.
type children struct {
	frontends map[string]*armnetwork.FrontendIPConfiguration
	pools     map[string]*armnetwork.BackendAddressPool
	probes    map[string]*armnetwork.Probe
	rules     []*armnetwork.LoadBalancingRule
}

func index(raw *armnetwork.LoadBalancer) children {
	c := children{
		frontends: map[string]*armnetwork.FrontendIPConfiguration{},
		pools:     map[string]*armnetwork.BackendAddressPool{},
		probes:    map[string]*armnetwork.Probe{},
	}
	if raw == nil || raw.Properties == nil {
		return c
	}
	for _, f := range raw.Properties.FrontendIPConfigurations {
		c.frontends[strings.ToLower(str(f.Name))] = f
	}
	for _, x := range raw.Properties.BackendAddressPools {
		c.pools[strings.ToLower(str(x.Name))] = x
	}
	for _, x := range raw.Properties.Probes {
		c.probes[strings.ToLower(str(x.Name))] = x
	}
	c.rules = raw.Properties.LoadBalancingRules
	return c
}

// refName is the child name a resource reference ends in.
func refName(r *armnetwork.SubResource) string {
	if r == nil || r.ID == nil {
		return ""
	}
	id := *r.ID
	return strings.ToLower(id[strings.LastIndexByte(id, '/')+1:])
}

// toModel reads zerodrop's listeners from a load balancer: one per rule
// with the zerodrop prefix, with its frontend's address, its probe and the
// addresses of its pool on the rule's backend port. Foreign rules are not
// zerodrop's and not reported.
func toModel(key string, raw *armnetwork.LoadBalancer) *model.LoadBalancer {
	lb := &model.LoadBalancer{Key: key, Version: str(raw.Etag)}
	n := namesFromTags(raw.Tags)
	c := index(raw)
	for _, r := range c.rules {
		if !owned(r.Name) || r.Properties == nil {
			continue
		}
		rp := r.Properties
		name, ok := n.parseRule(*r.Name)
		if !ok {
			// An orphan (its name tag is gone): reported under its rule name,
			// so that the diff deletes it.
			name = *r.Name
		}
		backendPort := deref(rp.BackendPort)
		l := model.Listener{Name: name, Port: deref(rp.FrontendPort), Protocol: fromTransport(rp.Protocol)}
		if fe := c.frontends[refName(rp.FrontendIPConfiguration)]; fe != nil && fe.Properties != nil {
			l.Address = str(fe.Properties.PrivateIPAddress)
		}
		if pr := c.probes[refName(rp.Probe)]; pr != nil {
			l.Probe = fromProbe(pr, backendPort)
		}
		if pool := c.pools[refName(rp.BackendAddressPool)]; pool != nil {
			l.Backends = fromPool(pool, backendPort)
		}
		lb.Listeners = append(lb.Listeners, l)
	}
	return model.Canonical(lb)
}

// fromPool lists a pool's addresses as backends on port. Admin state Down
// is how a draining backend is kept (see docs/azure.md).
func fromPool(pool *armnetwork.BackendAddressPool, port int32) []model.Backend {
	if pool.Properties == nil {
		return nil
	}
	var out []model.Backend
	for _, a := range pool.Properties.LoadBalancerBackendAddresses {
		if a == nil || a.Properties == nil || a.Properties.IPAddress == nil {
			continue
		}
		b := model.Backend{Address: *a.Properties.IPAddress, Port: port, Weight: model.DefaultWeight, State: model.Active}
		if s := a.Properties.AdminState; s != nil && *s == armnetwork.LoadBalancerBackendAddressAdminStateDown {
			b.State, b.Weight = model.Draining, 0
		}
		out = append(out, b)
	}
	return out
}

func fromTransport(p *armnetwork.TransportProtocol) model.Protocol {
	switch {
	case p == nil:
		return ""
	case *p == armnetwork.TransportProtocolTCP:
		return model.TCP
	case *p == armnetwork.TransportProtocolUDP:
		return model.UDP
	}
	return model.Protocol(strings.ToUpper(string(*p)))
}

func toTransport(p model.Protocol) armnetwork.TransportProtocol {
	if p == model.UDP {
		return armnetwork.TransportProtocolUDP
	}
	return armnetwork.TransportProtocolTCP
}

// servicesOn lists the Services (namespace/name) with a zerodrop frontend
// on a load balancer.
func servicesOn(raw *armnetwork.LoadBalancer) []string {
	if raw == nil || raw.Properties == nil {
		return nil
	}
	n := namesFromTags(raw.Tags)
	var out []string
	for _, f := range raw.Properties.FrontendIPConfigurations {
		if !owned(f.Name) {
			continue
		}
		if svc, ok := n.svcOf(strings.TrimPrefix(*f.Name, childPrefix)); ok {
			out = append(out, svc)
		}
	}
	return out
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
