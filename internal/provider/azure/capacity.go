package azure

import (
	"fmt"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// A Standard Load Balancer has at most 600 frontend IP configurations and
// 1,500 rules, load-balancing and inbound NAT rules together
// (https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/azure-subscription-service-limits#load-balancer).
// zerodrop gives each Service one frontend and each of its ports one rule,
// and writes every Service of a load balancer in one document: ARM refuses
// a PUT past either limit whole, so one Service too many would stop the
// writes of all the others. overCapacity names that Service instead.
const (
	DefaultMaxFrontends = 600
	DefaultMaxRules     = 1500
)

// capacity is what a load balancer may hold.
type capacity struct{ frontends, rules int }

// usage is what one Service (or the children zerodrop does not own) takes.
type usage struct{ frontends, rules int }

func (u usage) plus(o usage) usage  { return usage{u.frontends + o.frontends, u.rules + o.rules} }
func (u usage) minus(o usage) usage { return usage{u.frontends - o.frontends, u.rules - o.rules} }
func (u usage) within(c capacity) bool {
	return u.frontends <= c.frontends && u.rules <= c.rules
}

// overCapacity names the Services of lb whose frontend and rules would take
// the load balancer past c, so that the controller leaves them as they are
// (as observed: nothing, for a new Service) and writes the others. Which
// Services win is a function of the stored document and lb alone, so a
// restart decides the same and writes nothing:
//
//   - every Service keeps what raw already gives it (its room is reserved
//     first), and so do the Services bad names (the controller keeps them
//     as observed);
//   - a Service that needs no more than it has (or less) is never refused;
//   - the room left goes to the Services already on the load balancer that
//     grow, then to new ones, each in namespace/name order.
//
// Children zerodrop does not own (another controller's frontends and rules,
// inbound NAT rules) count as they are: render keeps them.
func overCapacity(key string, raw *armnetwork.LoadBalancer, lb *model.LoadBalancer, bad map[string]error, c capacity) map[string]error {
	if lb == nil {
		return nil
	}
	want := map[string]usage{}
	for _, l := range lb.Listeners {
		svc, _, err := listenerParts(l.Name)
		if err != nil {
			continue // render reports it
		}
		w := want[svc]
		w.frontends, w.rules = 1, w.rules+1
		want[svc] = w
	}
	base, have := inUse(raw)
	used := base
	for svc := range want {
		used = used.plus(have[svc])
	}
	var shrink, grow, fresh []string
	for svc, w := range want {
		switch h, on := have[svc]; {
		case bad[svc] != nil || w.minus(h).within(capacity{}):
			shrink = append(shrink, svc)
		case on:
			grow = append(grow, svc)
		default:
			fresh = append(fresh, svc)
		}
	}
	for _, svc := range shrink {
		if bad[svc] == nil {
			used = used.plus(want[svc].minus(have[svc]))
		}
	}
	sort.Strings(grow)
	sort.Strings(fresh)
	out := map[string]error{}
	for _, svc := range append(grow, fresh...) {
		next := used.plus(want[svc].minus(have[svc]))
		if next.within(c) {
			used = next
			continue
		}
		out[svc] = &UnrepresentableError{Reason: fmt.Sprintf(
			"Service %s needs a frontend and %d rules (one a port) on load balancer %s, past Azure's limits of %d frontend IP configurations and %d rules there (%d and %d taken by children zerodrop does not own and by Services there before it or before it in name order): place it on another load balancer (annotation %s) or free room",
			svc, want[svc].rules, key, c.frontends, c.rules, used.frontends, used.rules, AnnotationLoadBalancer)}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// inUse counts raw's children: those zerodrop does not own (base), and
// zerodrop's per Service.
func inUse(raw *armnetwork.LoadBalancer) (base usage, have map[string]usage) {
	have = map[string]usage{}
	if raw == nil || raw.Properties == nil {
		return base, have
	}
	n := namesFromTags(raw.Tags)
	base.rules = len(raw.Properties.InboundNatRules)
	for _, f := range raw.Properties.FrontendIPConfigurations {
		svc, ok := "", false
		if owned(f.Name) {
			svc, ok = n.svcOf(strings.TrimPrefix(*f.Name, childPrefix))
		}
		if !ok {
			base.frontends++
			continue
		}
		h := have[svc]
		h.frontends++
		have[svc] = h
	}
	for _, r := range raw.Properties.LoadBalancingRules {
		listener, ok := "", false
		if owned(r.Name) {
			listener, ok = n.parseRule(*r.Name)
		}
		svc, _, err := listenerParts(listener)
		if !ok || err != nil {
			base.rules++
			continue
		}
		h := have[svc]
		h.rules++
		have[svc] = h
	}
	return base, have
}
