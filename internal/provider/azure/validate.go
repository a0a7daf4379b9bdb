package azure

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.Validator = (*Provider)(nil)

// Invalid implements provider.Validator. Many Services share one load
// balancer, and render refuses the whole document when one listener cannot
// be expressed; naming the Services at fault before the plan lets the
// controller keep their rules as observed and write the others' changes.
// It checks, per Service, what render would refuse: one backend port per
// rule (a named targetPort resolves to two ports while a rollout changes
// it), IPv4 backends (the frontends are IPv4), the tag that names a
// long-named Service (Azure allows maxTags), and room for its frontend and
// rules (Options.MaxFrontends, MaxRules: overCapacity).
func (p *Provider) Invalid(key string, lb *model.LoadBalancer) map[string]error {
	if lb == nil {
		return nil
	}
	p.mu.Lock()
	raw := p.observed[key]
	p.mu.Unlock()
	out := invalid(raw, lb)
	// Last: a Service refused above keeps its observed room, the others
	// share what is left (capacity.go).
	for svc, err := range overCapacity(key, raw, lb, out, capacity{p.opts.MaxFrontends, p.opts.MaxRules}) {
		if out == nil {
			out = map[string]error{}
		}
		out[svc] = err
	}
	return out
}

// invalid is Invalid against the load balancer document raw (nil when it
// does not exist yet).
func invalid(raw *armnetwork.LoadBalancer, lb *model.LoadBalancer) map[string]error {
	out := map[string]error{}
	long := map[string]bool{}
	for _, l := range lb.Listeners {
		svc, _, err := listenerParts(l.Name)
		if err != nil || out[svc] != nil {
			continue // a malformed name is not any Service's: render reports it
		}
		if _, err := commonPort(l); err != nil {
			out[svc] = err
			continue
		}
		for _, b := range l.Backends {
			if a, err := netip.ParseAddr(b.Address); err != nil || !a.Is4() {
				out[svc] = &UnrepresentableError{Listener: l.Name,
					Reason: fmt.Sprintf("backend address %q is not IPv4; zerodrop's Azure frontends are IPv4", b.Address)}
				break
			}
		}
		if _, isLong := svcPart(svc); isLong && out[svc] == nil {
			long[svc] = true
		}
	}
	for svc, err := range tagOverflow(raw, lb, long) {
		out[svc] = err
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// tagOverflow names the long-named Services whose tag would not fit. The
// Services that have their tag already keep it; the others get the room
// left in name order.
func tagOverflow(raw *armnetwork.LoadBalancer, lb *model.LoadBalancer, long map[string]bool) map[string]error {
	if len(long) == 0 {
		return nil
	}
	// The tags render keeps or adds besides the Services' own.
	base := map[string]bool{}
	tagged := map[string]bool{}
	if raw != nil {
		for k, v := range raw.Tags {
			if strings.HasPrefix(k, tagSvcPrefix) {
				if v != nil {
					tagged[*v] = true
				}
				continue
			}
			base[k] = true
		}
	} else {
		base[TagCreated] = true
	}
	if len(lb.Listeners) > 0 {
		base[TagOwner] = true
	}
	svcs := make([]string, 0, len(long))
	for svc := range long {
		svcs = append(svcs, svc)
	}
	sort.Slice(svcs, func(i, j int) bool {
		if tagged[svcs[i]] != tagged[svcs[j]] {
			return tagged[svcs[i]]
		}
		return svcs[i] < svcs[j]
	})
	out := map[string]error{}
	for i, svc := range svcs {
		if len(base)+i+1 > maxTags {
			out[svc] = &UnrepresentableError{Reason: fmt.Sprintf(
				"Service %s needs a tag for its long name, and the load balancer has all %d tags Azure allows in use: shorten namespace/name (at most %d characters)",
				svc, maxTags, maxSvcPart-1)}
		}
	}
	return out
}
