package azurearm

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// apiError is a refusal with an HTTP status and an ARM error code.
type apiError struct {
	status int
	code   string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.code) }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: 400, code: fmt.Sprintf(format, args...)}
}

// childName is Azure's rule for load balancer child names: 1-80 characters,
// letters, digits, '_', '.', '-', starting with a letter or digit and ending
// with a letter, digit or '_'.
var childName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?$`)

// validateTags applies ARM's tag limits: 50 tags, names up to 512 characters
// without < > % & \ ? /, values up to 256 characters.
func validateTags(tags map[string]*string) *apiError {
	if len(tags) > 50 {
		return badRequest("InvalidTagCount: %d tags, at most 50", len(tags))
	}
	for k, v := range tags {
		if k == "" || len(k) > 512 || strings.ContainsAny(k, `<>%&\?/`) {
			return badRequest("InvalidTagNameCharacters: %q", k)
		}
		if v != nil && len(*v) > 256 {
			return badRequest("InvalidTagValueLength: tag %q", k)
		}
	}
	return nil
}

// ids builds and reads the resource IDs of one load balancer's children.
type ids struct{ lb string }

func (i ids) child(kind, name string) string { return i.lb + "/" + kind + "/" + name }

// ref returns the child name a reference points at, if it points into this
// load balancer's collection kind.
func (i ids) ref(r *armnetwork.SubResource, kind string) (string, bool) {
	if r == nil || r.ID == nil {
		return "", false
	}
	prefix := i.lb + "/" + kind + "/"
	if len(*r.ID) <= len(prefix) || !strings.EqualFold((*r.ID)[:len(prefix)], prefix) {
		return "", false
	}
	return strings.ToLower((*r.ID)[len(prefix):]), true
}

// checkNames refuses invalid and duplicate child names.
func checkNames(kind string, names []*string) (map[string]bool, *apiError) {
	seen := map[string]bool{}
	for _, n := range names {
		if n == nil || !childName.MatchString(*n) {
			return nil, badRequest("InvalidResourceName: %s %q", kind, str(n))
		}
		if seen[strings.ToLower(*n)] {
			return nil, badRequest("DuplicateResourceName: %s %q", kind, *n)
		}
		seen[strings.ToLower(*n)] = true
	}
	return seen, nil
}

func validateProbe(p *armnetwork.Probe) *apiError {
	pp := p.Properties
	if pp == nil || pp.Port == nil || *pp.Port < 1 || *pp.Port > 65535 || pp.Protocol == nil {
		return badRequest("InvalidProbe: %s needs a protocol and a port", *p.Name)
	}
	switch *pp.Protocol {
	case armnetwork.ProbeProtocolTCP:
		if pp.RequestPath != nil {
			return badRequest("InvalidProbe: %s: a TCP probe has no requestPath", *p.Name)
		}
	case armnetwork.ProbeProtocolHTTP, armnetwork.ProbeProtocolHTTPS:
		if pp.RequestPath == nil || !strings.HasPrefix(*pp.RequestPath, "/") {
			return badRequest("InvalidProbe: %s: an HTTP probe needs a requestPath", *p.Name)
		}
	default:
		return badRequest("InvalidProbe: %s: protocol %q", *p.Name, *pp.Protocol)
	}
	if pp.IntervalInSeconds != nil && *pp.IntervalInSeconds < 5 {
		return badRequest("ProbeIntervalTooSmall: %s: %ds, at least 5s", *p.Name, *pp.IntervalInSeconds)
	}
	if pp.ProbeThreshold != nil && *pp.ProbeThreshold < 1 {
		return badRequest("InvalidProbe: %s: probeThreshold %d", *p.Name, *pp.ProbeThreshold)
	}
	return nil
}

// validatePool checks an IP-based pool: every address has an IP and a
// virtual network (or subnet), names and IPs are unique.
func validatePool(p *armnetwork.BackendAddressPool) *apiError {
	if p.Properties == nil {
		return nil
	}
	names := map[string]bool{}
	ips := map[netip.Addr]bool{}
	for _, a := range p.Properties.LoadBalancerBackendAddresses {
		if a == nil || a.Name == nil || a.Properties == nil || a.Properties.IPAddress == nil {
			return badRequest("InvalidBackendAddress: pool %s: an address needs a name and an IP", *p.Name)
		}
		ip, err := netip.ParseAddr(*a.Properties.IPAddress)
		if err != nil {
			return badRequest("InvalidBackendAddress: pool %s: %q", *p.Name, *a.Properties.IPAddress)
		}
		// The network may be named per address or once for the pool
		// (cloud-provider-azure's nodeIP pools do the latter).
		vnet := a.Properties.VirtualNetwork != nil && a.Properties.VirtualNetwork.ID != nil ||
			p.Properties.VirtualNetwork != nil && p.Properties.VirtualNetwork.ID != nil
		subnet := a.Properties.Subnet != nil && a.Properties.Subnet.ID != nil
		if !vnet && !subnet {
			return badRequest("InvalidBackendAddress: pool %s: %s has no virtual network", *p.Name, ip)
		}
		if names[*a.Name] || ips[ip] {
			return badRequest("DuplicateBackendAddress: pool %s: %s", *p.Name, ip)
		}
		names[*a.Name], ips[ip] = true, true
		if s := a.Properties.AdminState; s != nil {
			switch *s {
			case armnetwork.LoadBalancerBackendAddressAdminStateDown, armnetwork.LoadBalancerBackendAddressAdminStateUp,
				armnetwork.LoadBalancerBackendAddressAdminStateNone:
			default:
				return badRequest("InvalidAdminState: pool %s: %q", *p.Name, *s)
			}
		}
	}
	return nil
}

// validateRules checks references and the uniqueness of each frontend's
// protocol and port.
func validateRules(id ids, rules []*armnetwork.LoadBalancingRule, frontends, pools, probes map[string]bool) *apiError {
	used := map[string]string{}
	for _, r := range rules {
		rp := r.Properties
		if rp == nil || rp.Protocol == nil || rp.FrontendPort == nil || rp.BackendPort == nil {
			return badRequest("InvalidLoadBalancingRule: %s needs protocol and ports", *r.Name)
		}
		fe, ok := id.ref(rp.FrontendIPConfiguration, "frontendIPConfigurations")
		if !ok || !frontends[fe] {
			return badRequest("InvalidResourceReference: rule %s: frontend", *r.Name)
		}
		if pool, ok := id.ref(rp.BackendAddressPool, "backendAddressPools"); !ok || !pools[pool] {
			return badRequest("InvalidResourceReference: rule %s: backend pool", *r.Name)
		}
		if rp.Probe != nil {
			if pr, ok := id.ref(rp.Probe, "probes"); !ok || !probes[pr] {
				return badRequest("InvalidResourceReference: rule %s: probe", *r.Name)
			}
		}
		if *rp.FrontendPort < 1 || *rp.FrontendPort > 65534 || *rp.BackendPort < 1 || *rp.BackendPort > 65535 {
			return badRequest("InvalidLoadBalancingRule: %s: ports %d→%d", *r.Name, *rp.FrontendPort, *rp.BackendPort)
		}
		if t := rp.IdleTimeoutInMinutes; t != nil && (*t < 4 || *t > 100) {
			return badRequest("InvalidIdleTimeout: %s: %d minutes", *r.Name, *t)
		}
		k := fmt.Sprintf("%s|%s|%d", fe, *rp.Protocol, *rp.FrontendPort)
		if other, dup := used[k]; dup {
			return badRequest("LoadBalancingRulesWithSameFrontendPort: %s and %s", other, *r.Name)
		}
		used[k] = *r.Name
	}
	return nil
}
