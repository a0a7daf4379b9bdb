package azuredp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The data plane's model of what ARM stores: the parts of the load-balancer
// documents that decide where a packet goes, with ARM's defaults filled in.
// Built from the documents alone (no namespace), so it is tested without
// root.

// Azure's documented defaults for fields a document may leave out.
const (
	// defaultInterval: ARM's intervalInSeconds default (15; cloud-provider-azure
	// writes 5). ProbePropertiesFormat in the network REST spec.
	defaultInterval = 15 * time.Second
	// defaultIdle: a rule's idleTimeoutInMinutes default (4 minutes).
	defaultIdle = 4 * time.Minute
	// httpProbeTimeout: an HTTP(S) probe fails when no answer comes within
	// the smaller of its interval and this (load-balancer-custom-probe-overview).
	httpProbeTimeout = 30 * time.Second
)

// Admin states of a backend address (LoadBalancerBackendAddressAdminState).
const (
	adminNone = "None"
	adminUp   = "Up"
	adminDown = "Down"
)

// model is every load balancer of the resource group as the data plane
// programs it.
type model struct {
	rules  []rule                 // sorted by lb, then name
	probes map[probeKey]probeSpec // the probes rules use
	// skipped says what is stored but not programmed, and why.
	skipped   []string
	scale     float64               // Config.ProbeScale
	ipconfigs map[string]netip.Addr // Config.Compute's, when the model was built
}

// rule is one load-balancing rule: TCP from frontend:port to the pool.
type rule struct {
	LB, Name    string // as stored (names are case-insensitive in ARM)
	Frontend    netip.Addr
	Port        uint16
	BackendPort uint16
	Floating    bool
	// Probe is the rule's probe ("" for none: every address gets new flows,
	// admin state has no effect, admin-state-overview).
	Probe        string
	Backends     []backend // the union of the rule's pools, sorted
	Distribution armnetwork.LoadDistribution
	Idle         time.Duration
}

func (r rule) key() ruleKey { return ruleKey{strings.ToLower(r.LB), strings.ToLower(r.Name)} }

func (r rule) probeKey() probeKey {
	return probeKey{strings.ToLower(r.LB), strings.ToLower(r.Probe)}
}

type ruleKey struct{ lb, rule string }

type probeKey struct{ lb, probe string }

// backend is one address of a pool with its admin state; IPConfig is the
// NIC ipconfig ID it was resolved from, for a member of a NIC-based pool
// ("" for an IP-based one).
type backend struct {
	Addr     netip.Addr
	Admin    string
	IPConfig string
}

// probeSpec is a probe document with its defaults.
type probeSpec struct {
	Protocol  armnetwork.ProbeProtocol
	Port      uint16
	Path      string
	Interval  time.Duration
	Threshold int
	// AllProbedUp: noHealthyBackendsBehavior AllProbedUp (new flows go to
	// every address when all are probed down); the default AllProbedDown
	// sends none.
	AllProbedUp bool
	// httpTimeout is 30 s, scaled with the interval.
	httpTimeout time.Duration
}

// timeout is how long one probe may take: a TCP probe fails when the next
// one is due, an HTTP(S) probe after min(interval, 30 s).
func (p probeSpec) timeout() time.Duration {
	if p.Protocol != armnetwork.ProbeProtocolTCP && p.Interval > p.httpTimeout {
		return p.httpTimeout
	}
	return p.Interval
}

// buildModel reads the load balancers' documents; probe intervals are
// multiplied by scale. ipconfigs resolves a NIC-based pool's members
// (lower-cased ipconfig ID to private address; nil: no compute side).
func buildModel(lbs []*armnetwork.LoadBalancer, ipconfigs map[string]netip.Addr, scale float64) model {
	m := model{probes: map[probeKey]probeSpec{}, scale: scale, ipconfigs: ipconfigs}
	for _, lb := range lbs {
		if lb == nil || lb.Name == nil || lb.Properties == nil {
			continue
		}
		m.addLB(lb)
	}
	slices.SortFunc(m.rules, func(a, b rule) int {
		return cmp.Or(strings.Compare(a.key().lb, b.key().lb), strings.Compare(a.key().rule, b.key().rule))
	})
	return m
}

func (m *model) addLB(lb *armnetwork.LoadBalancer) {
	p := lb.Properties
	name := *lb.Name
	frontends := map[string]netip.Addr{}
	for _, f := range p.FrontendIPConfigurations {
		if f == nil || f.Name == nil || f.Properties == nil || f.Properties.PrivateIPAddress == nil {
			continue // a public frontend's address is in its public IP resource: not modelled
		}
		if a, err := netip.ParseAddr(*f.Properties.PrivateIPAddress); err == nil && a.Is4() {
			frontends[strings.ToLower(*f.Name)] = a
		}
	}
	pools := map[string][]backend{}
	for _, pool := range p.BackendAddressPools {
		if pool == nil || pool.Name == nil || pool.Properties == nil {
			continue
		}
		bs := m.nicMembers(name, pool)
		for _, a := range pool.Properties.LoadBalancerBackendAddresses {
			if a == nil || a.Properties == nil || a.Properties.IPAddress == nil {
				continue // a NIC-based pool's entry: its members are its backendIPConfigurations
			}
			addr, err := netip.ParseAddr(*a.Properties.IPAddress)
			if err != nil || !addr.Is4() {
				continue
			}
			admin := adminNone
			if a.Properties.AdminState != nil && *a.Properties.AdminState != "" {
				admin = string(*a.Properties.AdminState)
			}
			bs = append(bs, backend{Addr: addr, Admin: admin})
		}
		pools[strings.ToLower(*pool.Name)] = bs
	}
	probes := map[string]*armnetwork.Probe{}
	for _, pr := range p.Probes {
		if pr != nil && pr.Name != nil && pr.Properties != nil {
			probes[strings.ToLower(*pr.Name)] = pr
		}
	}
	for _, r := range p.LoadBalancingRules {
		if r == nil || r.Name == nil || r.Properties == nil {
			continue
		}
		if why := m.addRule(name, r, frontends, pools, probes); why != "" {
			m.skipped = append(m.skipped, fmt.Sprintf("load balancer %s rule %s: %s", name, *r.Name, why))
		}
	}
}

// nicMembers are the members of a NIC-based pool: its
// backendIPConfigurations (which ARM derives from the NICs and scale-set
// VMs that name the pool), each resolved to its ipconfig's private address.
// A NIC ipconfig has no admin state of its own here (adminNone). An ID the
// compute side does not hold is skipped, and said so.
func (m *model) nicMembers(lb string, pool *armnetwork.BackendAddressPool) []backend {
	var out []backend
	for _, c := range pool.Properties.BackendIPConfigurations {
		if c == nil || c.ID == nil {
			continue
		}
		addr, ok := m.ipconfigs[strings.ToLower(*c.ID)]
		if !ok || !addr.Is4() {
			m.skipped = append(m.skipped, fmt.Sprintf("load balancer %s pool %s: member %s has no IPv4 address on the compute side", lb, *pool.Name, *c.ID))
			continue
		}
		out = append(out, backend{Addr: addr, Admin: adminNone, IPConfig: *c.ID})
	}
	return out
}

// addRule adds one rule, or says why it is not programmed.
func (m *model) addRule(lb string, r *armnetwork.LoadBalancingRule, frontends map[string]netip.Addr,
	pools map[string][]backend, probes map[string]*armnetwork.Probe) string {
	rp := r.Properties
	if rp.Protocol == nil || *rp.Protocol != armnetwork.TransportProtocolTCP {
		return "protocol is not Tcp (UDP and All are out of scope)"
	}
	fe, ok := frontends[refName(rp.FrontendIPConfiguration)]
	if !ok {
		return "no private IPv4 frontend address"
	}
	if rp.FrontendPort == nil || *rp.FrontendPort < 1 || *rp.FrontendPort > 65535 {
		return "frontend port 0 (HA ports) is out of scope"
	}
	out := rule{LB: lb, Name: *r.Name, Frontend: fe, Port: uint16(*rp.FrontendPort), BackendPort: uint16(*rp.FrontendPort),
		Floating: rp.EnableFloatingIP != nil && *rp.EnableFloatingIP, Distribution: armnetwork.LoadDistributionDefault, Idle: defaultIdle}
	if rp.BackendPort != nil && *rp.BackendPort > 0 && *rp.BackendPort <= 65535 {
		out.BackendPort = uint16(*rp.BackendPort)
	}
	if out.Floating && out.BackendPort != out.Port {
		// The reply leaves the backend with the frontend's address and the
		// backend port and never passes here to be rewritten.
		return "floating IP with a backend port other than the frontend port is out of scope"
	}
	if rp.LoadDistribution != nil && *rp.LoadDistribution != "" {
		out.Distribution = *rp.LoadDistribution
	}
	if rp.IdleTimeoutInMinutes != nil && *rp.IdleTimeoutInMinutes > 0 {
		out.Idle = time.Duration(*rp.IdleTimeoutInMinutes) * time.Minute
	}
	seen := map[netip.Addr]bool{}
	poolRefs := append([]*armnetwork.SubResource{rp.BackendAddressPool}, rp.BackendAddressPools...)
	for _, ref := range poolRefs {
		for _, b := range pools[refName(ref)] {
			if !seen[b.Addr] {
				seen[b.Addr] = true
				out.Backends = append(out.Backends, b)
			}
		}
	}
	slices.SortFunc(out.Backends, func(a, b backend) int { return a.Addr.Compare(b.Addr) })
	if name := refName(rp.Probe); name != "" {
		pr, ok := probes[name]
		if !ok {
			return "its probe " + name + " is not stored"
		}
		spec, why := probeFrom(pr.Properties, m.scale)
		if why != "" {
			return "probe " + name + ": " + why
		}
		out.Probe = *pr.Name
		m.probes[out.probeKey()] = spec
	}
	m.rules = append(m.rules, out)
	return ""
}

// probeFrom reads a probe document. The failure and success count is
// probeThreshold, else numberOfProbes, else 1 (the REST spec:
// "the number of consecutive successful or failed probes").
func probeFrom(p *armnetwork.ProbePropertiesFormat, scale float64) (probeSpec, string) {
	if p.Protocol == nil || p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
		return probeSpec{}, "no protocol or port"
	}
	s := probeSpec{Protocol: *p.Protocol, Port: uint16(*p.Port), Interval: defaultInterval, Threshold: 1}
	switch s.Protocol {
	case armnetwork.ProbeProtocolTCP:
	case armnetwork.ProbeProtocolHTTP, armnetwork.ProbeProtocolHTTPS:
		s.Path = "/"
		if p.RequestPath != nil && *p.RequestPath != "" {
			s.Path = *p.RequestPath
		}
	default:
		return probeSpec{}, "protocol " + string(s.Protocol) + " is not Tcp, Http or Https"
	}
	if p.IntervalInSeconds != nil && *p.IntervalInSeconds > 0 {
		s.Interval = time.Duration(*p.IntervalInSeconds) * time.Second
	}
	s.Interval = time.Duration(float64(s.Interval) * scale)
	s.httpTimeout = time.Duration(float64(httpProbeTimeout) * scale)
	switch {
	case p.ProbeThreshold != nil && *p.ProbeThreshold > 0:
		s.Threshold = int(*p.ProbeThreshold)
	case p.NumberOfProbes != nil && *p.NumberOfProbes > 0:
		s.Threshold = int(*p.NumberOfProbes)
	}
	s.AllProbedUp = p.NoHealthyBackendsBehavior != nil && *p.NoHealthyBackendsBehavior == armnetwork.ProbeNoHealthyBackendsBehaviorAllProbedUp
	return s, ""
}

// refName is the last segment of a child resource's ID, lower case.
func refName(ref *armnetwork.SubResource) string {
	if ref == nil || ref.ID == nil {
		return ""
	}
	id := strings.TrimRight(*ref.ID, "/")
	return strings.ToLower(id[strings.LastIndex(id, "/")+1:])
}

// frontends is every frontend address a rule uses.
func (m model) frontends() []netip.Addr {
	var out []netip.Addr
	for _, r := range m.rules {
		if !slices.Contains(out, r.Frontend) {
			out = append(out, r.Frontend)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// targets is every (probe, address) pair to probe: each rule's probe on
// each address of its pools.
func (m model) targets() map[target]probeSpec {
	out := map[target]probeSpec{}
	for _, r := range m.rules {
		if r.Probe == "" {
			continue
		}
		for _, b := range r.Backends {
			out[target{r.probeKey(), b.Addr}] = m.probes[r.probeKey()]
		}
	}
	return out
}

// target is one backend address probed by one probe.
type target struct {
	probe probeKey
	addr  netip.Addr
}

// eligible is the addresses of r that get new flows, given each target's
// probe state: admin Down never, admin Up always, otherwise while its probe
// is Up; with every address probed down, none (AllProbedDown) or all but
// admin Down (AllProbedUp). A rule without a probe sends to every address.
func (m model) eligible(r rule, up func(target) bool) []netip.Addr {
	var out, notDown []netip.Addr
	for _, b := range r.Backends {
		if r.Probe == "" {
			out = append(out, b.Addr)
			continue
		}
		switch {
		case strings.EqualFold(b.Admin, adminDown):
			continue
		case strings.EqualFold(b.Admin, adminUp), up(target{r.probeKey(), b.Addr}):
			out = append(out, b.Addr)
		}
		notDown = append(notDown, b.Addr)
	}
	if len(out) == 0 && r.Probe != "" && m.probes[r.probeKey()].AllProbedUp {
		return notDown
	}
	return out
}
