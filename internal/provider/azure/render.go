package azure

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// idleTimeoutMinutes is the rules' idle timeout, Azure's default: with TCP
// reset on, an idle connection gets a RST at both ends instead of silence.
const idleTimeoutMinutes = 4

// render builds the load balancer document to PUT: raw's foreign children,
// tags and settings as they are, zerodrop's children generated from lb. Every
// zerodrop child lb does not need (an old probe, an empty pool) is left out,
// so a PUT also cleans up.
func (p *Provider) render(key string, raw *armnetwork.LoadBalancer, lb *model.LoadBalancer) (*armnetwork.LoadBalancer, error) {
	out := &armnetwork.LoadBalancer{Name: to.Ptr(key), Tags: map[string]*string{}, Properties: &armnetwork.LoadBalancerPropertiesFormat{}}
	c := index(raw)
	if raw != nil {
		out.Location, out.SKU, out.ExtendedLocation = raw.Location, raw.SKU, raw.ExtendedLocation
		for k, v := range raw.Tags {
			if !strings.HasPrefix(k, tagSvcPrefix) {
				out.Tags[k] = v
			}
		}
		keepForeign(out.Properties, raw.Properties)
	} else {
		out.Location = to.Ptr(p.opts.Location)
		out.SKU = &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard), Tier: to.Ptr(armnetwork.LoadBalancerSKUTierRegional)}
		out.Tags[TagCreated] = to.Ptr("true")
	}
	if len(lb.Listeners) > 0 {
		out.Tags[TagOwner] = to.Ptr(p.opts.Owner)
	}

	oldRules := map[string]*armnetwork.LoadBalancingRule{}
	observedPools := map[string]string{}
	var tags map[string]*string
	if raw != nil {
		tags = raw.Tags
	}
	n := namesFromTags(tags)
	for _, r := range c.rules {
		if name, ok := n.parseRule(str(r.Name)); ok && owned(r.Name) && r.Properties != nil {
			oldRules[name] = r
			observedPools[name] = refName(r.Properties.BackendAddressPool)
		}
	}
	listeners := model.Canonical(lb).Listeners
	pools := assignPools(listeners, observedPools)
	props := out.Properties
	seenSvc := map[string]bool{}
	for _, l := range listeners {
		svc, _, err := listenerParts(l.Name)
		if err != nil {
			return nil, &UnrepresentableError{Listener: l.Name, Reason: err.Error()}
		}
		backendPort, err := commonPort(l)
		if err != nil {
			return nil, err
		}
		if backendPort == 0 {
			backendPort = l.Port
			if r := oldRules[l.Name]; r != nil && r.Properties.BackendPort != nil {
				backendPort = *r.Properties.BackendPort
			}
		}
		fe := frontendName(svc)
		if !seenSvc[svc] {
			seenSvc[svc] = true
			props.FrontendIPConfigurations = append(props.FrontendIPConfigurations,
				p.renderFrontend(fe, serviceAddress(listeners, svc), c.frontends[strings.ToLower(fe)]))
			if part, long := svcPart(svc); long {
				out.Tags[tagSvcPrefix+part] = to.Ptr(svc)
			}
		}
		rule, _ := ruleName(l.Name)
		probe := renderProbe(probeName(rule, l.Probe), l.Probe, backendPort)
		props.Probes = append(props.Probes, probe)
		props.LoadBalancingRules = append(props.LoadBalancingRules, &armnetwork.LoadBalancingRule{
			Name: to.Ptr(rule),
			Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				FrontendIPConfiguration: p.ref(key, "frontendIPConfigurations", fe),
				BackendAddressPool:      p.ref(key, "backendAddressPools", pools.of[l.Name]),
				Probe:                   p.ref(key, "probes", *probe.Name),
				Protocol:                to.Ptr(toTransport(l.Protocol)),
				FrontendPort:            to.Ptr(l.Port),
				BackendPort:             to.Ptr(backendPort),
				EnableTCPReset:          to.Ptr(l.Protocol != model.UDP),
				IdleTimeoutInMinutes:    to.Ptr(int32(idleTimeoutMinutes)),
				EnableFloatingIP:        to.Ptr(false),
				LoadDistribution:        to.Ptr(armnetwork.LoadDistributionDefault),
			},
		})
	}
	names := make([]string, 0, len(pools.content))
	for name := range pools.content {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		props.BackendAddressPools = append(props.BackendAddressPools, p.renderPool(key, name, pools.content[name]))
	}
	if len(out.Tags) > maxTags {
		return nil, &UnrepresentableError{Reason: fmt.Sprintf("%d tags needed, Azure allows %d: shorten namespace/name of Services (at most %d characters)",
			len(out.Tags), maxTags, maxSvcPart-1)}
	}
	return out, nil
}

// keepForeign copies what zerodrop does not own.
func keepForeign(out, in *armnetwork.LoadBalancerPropertiesFormat) {
	if in == nil {
		return
	}
	out.InboundNatRules, out.InboundNatPools, out.OutboundRules, out.Scope = in.InboundNatRules, in.InboundNatPools, in.OutboundRules, in.Scope
	for _, x := range in.FrontendIPConfigurations {
		if !owned(x.Name) {
			out.FrontendIPConfigurations = append(out.FrontendIPConfigurations, x)
		}
	}
	for _, x := range in.BackendAddressPools {
		if !owned(x.Name) {
			out.BackendAddressPools = append(out.BackendAddressPools, x)
		}
	}
	for _, x := range in.Probes {
		if !owned(x.Name) {
			out.Probes = append(out.Probes, x)
		}
	}
	for _, x := range in.LoadBalancingRules {
		if !owned(x.Name) {
			out.LoadBalancingRules = append(out.LoadBalancingRules, x)
		}
	}
}

// empty reports whether a load balancer has no children at all.
func empty(lb *armnetwork.LoadBalancer) bool {
	p := lb.Properties
	return p == nil || len(p.FrontendIPConfigurations)+len(p.BackendAddressPools)+len(p.Probes)+len(p.LoadBalancingRules)+
		len(p.InboundNatRules)+len(p.InboundNatPools)+len(p.OutboundRules) == 0
}

// serviceAddress is the address the Service's listeners ask for ("" when
// Azure is to assign one).
func serviceAddress(listeners []model.Listener, svc string) string {
	for _, l := range listeners {
		if strings.HasPrefix(l.Name, svc+"/") && l.Address != "" {
			return l.Address
		}
	}
	return ""
}

// renderFrontend keeps an existing frontend's address (Azure assigned it,
// dynamically) unless another one is asked for; a new one gets a dynamic
// address from the subnet.
func (p *Provider) renderFrontend(name, addr string, old *armnetwork.FrontendIPConfiguration) *armnetwork.FrontendIPConfiguration {
	props := &armnetwork.FrontendIPConfigurationPropertiesFormat{
		Subnet:                    &armnetwork.Subnet{ID: to.Ptr(p.opts.SubnetID)},
		PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
	}
	fe := &armnetwork.FrontendIPConfiguration{Name: to.Ptr(name), Properties: props}
	if old != nil && old.Properties != nil {
		if old.Properties.Subnet != nil && old.Properties.Subnet.ID != nil {
			props.Subnet.ID = old.Properties.Subnet.ID
		}
		if old.Properties.PrivateIPAllocationMethod != nil {
			props.PrivateIPAllocationMethod = old.Properties.PrivateIPAllocationMethod
		}
		props.PrivateIPAddress, fe.Zones = old.Properties.PrivateIPAddress, old.Zones
	}
	if addr != "" && addr != str(props.PrivateIPAddress) {
		props.PrivateIPAllocationMethod, props.PrivateIPAddress = to.Ptr(armnetwork.IPAllocationMethodStatic), to.Ptr(addr)
	}
	return fe
}

// renderPool is an IP-based pool: each backend address in the cluster's
// virtual network, admin state Down while it drains.
func (p *Provider) renderPool(key, name string, backends []model.Backend) *armnetwork.BackendAddressPool {
	bs := append([]model.Backend(nil), backends...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].Address < bs[j].Address })
	addrs := make([]*armnetwork.LoadBalancerBackendAddress, 0, len(bs))
	for _, b := range bs {
		state := armnetwork.LoadBalancerBackendAddressAdminStateNone
		if b.State == model.Draining {
			state = armnetwork.LoadBalancerBackendAddressAdminStateDown
		}
		addrs = append(addrs, &armnetwork.LoadBalancerBackendAddress{
			Name: to.Ptr(addressName(b.Address)),
			Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{
				IPAddress:      to.Ptr(b.Address),
				VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(p.vnetID)},
				AdminState:     to.Ptr(state),
			},
		})
	}
	return &armnetwork.BackendAddressPool{
		Name:       to.Ptr(name),
		ID:         to.Ptr(p.childID(key, "backendAddressPools", name)),
		Properties: &armnetwork.BackendAddressPoolPropertiesFormat{LoadBalancerBackendAddresses: addrs},
	}
}

// addressName names a pool address after its IP (':' is not allowed).
func addressName(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		ip = a.String()
	}
	return "ip-" + strings.ReplaceAll(ip, ":", "-")
}

// commonPort is the one backend port of a listener (0 without backends):
// Azure has one backend port per rule.
func commonPort(l model.Listener) (int32, error) {
	var port int32
	for _, b := range l.Backends {
		if port != 0 && b.Port != port {
			return 0, &UnrepresentableError{Listener: l.Name, Reason: fmt.Sprintf("backends on ports %d and %d; an Azure rule has one backend port", port, b.Port)}
		}
		port = b.Port
	}
	return port, nil
}

func (p *Provider) childID(key, kind, name string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/loadBalancers/%s/%s/%s",
		p.opts.SubscriptionID, p.opts.ResourceGroup, key, kind, name)
}

func (p *Provider) ref(key, kind, name string) *armnetwork.SubResource {
	return &armnetwork.SubResource{ID: to.Ptr(p.childID(key, kind, name))}
}
