package azure

import (
	"sort"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// Backend pools hold addresses only (the port is the rule's), so listeners
// whose backends have the same addresses and states can share one pool:
//
//   - the listeners of one Service with the same backends share the
//     Service's pool zd-<ns>.<name> (a listener that differs from the
//     Service's others gets its own pool, named like its rule);
//   - groups of different Services with the same non-empty backends share a
//     pool zd-shared.<n> — node-mode Cluster Services (all ready nodes), so
//     a node change is one write to that pool for all of them;
//   - a node-mode Local Service (its probe is the HTTP check on
//     healthCheckNodePort, see localListener) is never merged: it keeps its
//     own pool zd-<ns>.<name>. Its contents are still all nodes (none
//     admin Down for want of a local endpoint: ProbeDecidesLocal); the
//     probe keeps the nodes without a ready local endpoint out of rotation.
//
// Groups are rebuilt only when the whole load balancer is written anyway; a
// shared pool keeps its name while its members stay together.

// poolAssignment is where each listener's backends live.
type poolAssignment struct {
	of      map[string]string          // listener → pool
	content map[string][]model.Backend // pool → backends
}

type poolGroup struct {
	svcs      map[string]bool
	listeners []string
	sig       string
	backends  []model.Backend
	name      string
	local     bool // a node-mode Local Service's: never shared
}

// localListener reports whether l is a port of a node-mode Service with
// externalTrafficPolicy: Local: the model probes those on healthCheckNodePort
// over HTTP (model.Desired); every other listener is probed over TCP on its
// backend port.
func localListener(l model.Listener) bool {
	return l.Probe.Kind == model.ProbeHTTP && l.Probe.Port != 0
}

// signature identifies a backend set by address and state; ports are the
// rules' business.
func signature(bs []model.Backend) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.Address + "=" + string(b.State)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// assignPools groups listeners (sorted by name) into pools; observed maps
// listeners to the pools they use now, so that shared pools keep their names.
func assignPools(listeners []model.Listener, observed map[string]string) poolAssignment {
	var order []*poolGroup
	bySvcSig := map[string]*poolGroup{}
	groupsOf := map[string]int{}
	for _, l := range listeners {
		svc, _, _ := listenerParts(l.Name)
		sig := signature(l.Backends)
		g := bySvcSig[svc+"\x00"+sig]
		if g == nil {
			g = &poolGroup{svcs: map[string]bool{svc: true}, sig: sig, backends: l.Backends}
			bySvcSig[svc+"\x00"+sig] = g
			order = append(order, g)
			groupsOf[svc]++
		}
		g.listeners = append(g.listeners, l.Name)
		g.local = g.local || localListener(l)
	}
	for _, g := range order {
		for svc := range g.svcs {
			if groupsOf[svc] == 1 {
				g.name = frontendName(svc)
			} else {
				g.name, _ = ruleName(g.listeners[0])
			}
		}
	}

	// Merge the groups of different Services with the same backends, but
	// not a Local Service's.
	bySig := map[string][]*poolGroup{}
	for _, g := range order {
		if g.sig != "" && !g.local {
			bySig[g.sig] = append(bySig[g.sig], g)
		}
	}
	var final, shared []*poolGroup
	done := map[*poolGroup]bool{}
	for _, g := range order {
		if done[g] {
			continue
		}
		peers := bySig[g.sig]
		if g.sig == "" || g.local || len(peers) < 2 {
			final = append(final, g)
			continue
		}
		m := &poolGroup{svcs: map[string]bool{}, sig: g.sig, backends: g.backends}
		for _, peer := range peers {
			done[peer] = true
			m.listeners = append(m.listeners, peer.listeners...)
			for s := range peer.svcs {
				m.svcs[s] = true
			}
		}
		shared = append(shared, m)
		final = append(final, m)
	}
	nameShared(shared, observed)

	out := poolAssignment{of: map[string]string{}, content: map[string][]model.Backend{}}
	for _, g := range final {
		out.content[g.name] = g.backends
		for _, l := range g.listeners {
			out.of[l] = g.name
		}
	}
	return out
}

// nameShared gives each shared group the shared pool most of its listeners
// use now, else the lowest free zd-shared.<n>.
func nameShared(groups []*poolGroup, observed map[string]string) {
	claimed := map[string]bool{}
	for _, g := range groups {
		votes := map[string]int{}
		for _, l := range g.listeners {
			if p := observed[l]; strings.HasPrefix(p, sharedPoolPrefix) && !claimed[p] {
				votes[p]++
			}
		}
		best := ""
		for p, n := range votes {
			if best == "" || n > votes[best] || n == votes[best] && p < best {
				best = p
			}
		}
		if best != "" {
			g.name, claimed[best] = best, true
		}
	}
	next := 0
	for _, g := range groups {
		for g.name == "" {
			if p := sharedPoolPrefix + strconv.Itoa(next); !claimed[p] {
				g.name, claimed[p] = p, true
			}
			next++
		}
	}
}

// poolWrite is a pool PUT with the ETag it must match.
type poolWrite struct {
	pool *armnetwork.BackendAddressPool
	etag string
}

// poolOnly reports whether plan can be written as one pool PUT: it changes
// backends only, of listeners that all live in one existing pool, whose
// members stay alike and whose rules keep their backend ports. Anything
// else is one load balancer PUT (also when two pools change: one write
// beats two).
func (p *Provider) poolOnly(key string, raw *armnetwork.LoadBalancer, next *model.LoadBalancer, plan model.Plan) (poolWrite, bool, error) {
	if raw == nil || plan.Create {
		return poolWrite{}, false, nil
	}
	for _, op := range plan.Ops {
		if op.Backend == nil {
			return poolWrite{}, false, nil
		}
	}
	n := namesFromTags(raw.Tags)
	c := index(raw)
	rules := map[string]*armnetwork.LoadBalancingRule{}
	for _, r := range c.rules {
		if name, ok := n.parseRule(str(r.Name)); ok && owned(r.Name) && r.Properties != nil {
			rules[name] = r
		}
	}
	members := map[string][]model.Listener{}
	for _, l := range next.Listeners {
		r := rules[l.Name]
		if r == nil {
			return poolWrite{}, false, nil
		}
		port, err := commonPort(l)
		if err != nil || port != 0 && port != deref(r.Properties.BackendPort) {
			return poolWrite{}, false, nil
		}
		pool := refName(r.Properties.BackendAddressPool)
		members[pool] = append(members[pool], l)
	}
	touched := map[string]bool{}
	for _, op := range plan.Ops {
		if r := rules[op.Listener]; r != nil {
			touched[refName(r.Properties.BackendAddressPool)] = true
		}
	}
	if len(touched) != 1 {
		return poolWrite{}, false, nil
	}
	var pool string
	for pool = range touched {
	}
	ls := members[pool]
	existing := c.pools[pool]
	if existing == nil || len(ls) == 0 || !strings.HasPrefix(pool, childPrefix) {
		return poolWrite{}, false, nil
	}
	for _, l := range ls[1:] {
		if signature(l.Backends) != signature(ls[0].Backends) {
			return poolWrite{}, false, nil
		}
	}
	etag := str(existing.Etag)
	if etag == "" {
		etag = str(raw.Etag)
	}
	return poolWrite{pool: p.renderPool(key, str(existing.Name), ls[0].Backends), etag: etag}, true, nil
}
