package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The router's forwarding table as the kernel has it — what the client's
// packets meet — read with `ip -j route show` and `ip -j nexthop show` in
// its namespace; and, with --router frr-resilient, the lab's programmer of
// it from bgpd's table.

// kernelRoute is one route of `ip -j route show`.
type kernelRoute struct {
	Type     string `json:"type"`
	Dst      string `json:"dst"`
	NHID     int    `json:"nhid"`
	Gateway  string `json:"gateway"`
	Nexthops []struct {
		Gateway string `json:"gateway"`
	} `json:"nexthops"`
}

// kernelNexthop is one object of `ip -j nexthop show`.
type kernelNexthop struct {
	ID      int    `json:"id"`
	Gateway string `json:"gateway"`
	Group   []struct {
		ID int `json:"id"`
	} `json:"group"`
	Type string `json:"type"` // "resilient" for a resilient group
}

// NextHops reads the kernel routes of namespace ns (its name) inside
// within: for each, its gateways, sorted (a route through a nexthop object
// is resolved through the objects; an unreachable or local one has none and
// is left out).
func NextHops(ctx context.Context, ns string, within netip.Prefix) (map[netip.Prefix][]netip.Addr, error) {
	var routes []kernelRoute
	if err := ipJSON(ctx, ns, &routes, "route", "show"); err != nil {
		return nil, err
	}
	var objs []kernelNexthop
	if err := ipJSON(ctx, ns, &objs, "nexthop", "show"); err != nil {
		return nil, err
	}
	return routeHops(routes, objs, within), nil
}

// routeHops is NextHops from what `ip -j route show` and `ip -j nexthop
// show` said.
func routeHops(routes []kernelRoute, objs []kernelNexthop, within netip.Prefix) map[netip.Prefix][]netip.Addr {
	byID := map[int]kernelNexthop{}
	for _, o := range objs {
		byID[o.ID] = o
	}
	out := map[netip.Prefix][]netip.Addr{}
	for _, r := range routes {
		if r.Type != "" && r.Type != "unicast" {
			continue
		}
		dst := r.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil || !within.Overlaps(p) || p.Bits() < within.Bits() {
			continue
		}
		// The route's own next hops first: the kernel expands a nexthop
		// object into the route's dump (nexthop_compat_mode), read at
		// once with the route, while the objects are read after it and
		// zebra may have replaced the route's object in between.
		gws := []string{r.Gateway}
		for _, nh := range r.Nexthops {
			gws = append(gws, nh.Gateway)
		}
		if r.NHID != 0 && r.Gateway == "" && len(r.Nexthops) == 0 {
			o := byID[r.NHID]
			gws = append(gws, o.Gateway)
			for _, m := range o.Group {
				gws = append(gws, byID[m.ID].Gateway)
			}
		}
		var hops []netip.Addr
		for _, g := range gws {
			if a, err := netip.ParseAddr(g); err == nil {
				hops = append(hops, a)
			}
		}
		slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
		if hops = slices.Compact(hops); len(hops) > 0 {
			out[p] = hops
		}
	}
	return out
}

// ipJSON runs `ip -n ns -j args...` and decodes its output.
func ipJSON(ctx context.Context, ns string, v any, args ...string) error {
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "ip", Args: append([]string{"-n", ns, "-j"}, args...)})
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("ip %s: parse %q: %w", strings.Join(args, " "), out, err)
	}
	return nil
}

// resilientBase is the first nexthop group id the programmer uses, above
// the lab's own (one per load-balancer host, and the stand-in's group) and
// below those zebra allocates for itself (it installs no BGP route here).
const resilientBase = 1000

// resilientBuckets is the size of each of the programmer's groups: 64, so
// that three members hold 21 or 22 buckets each.
const resilientBuckets = 64

// resilientGroup is the `ip nexthop` arguments of a resilient group over
// the hosts members (indices into the load-balancer hosts, nexthop id
// i+1), with the kernel's unbalanced timer when unbalanced is not zero
// (whole seconds). The idle timer stays the kernel's (120 s): a member
// added gets only buckets idle that long, which under steady traffic is
// none; the unbalanced timer is what moves buckets to it anyway once the
// group has been unbalanced that long (breaking the flows on the buckets
// that move). Given on every replace, so a replace never resets it.
func resilientGroup(members []int, unbalanced time.Duration) []string {
	ids := make([]string, len(members))
	for k, i := range members {
		ids[k] = strconv.Itoa(i + 1)
	}
	args := []string{"group", strings.Join(ids, "/"), "type", "resilient", "buckets", strconv.Itoa(resilientBuckets)}
	if unbalanced > 0 {
		args = append(args, "unbalanced_timer", strconv.Itoa(int(unbalanced/time.Second)))
	}
	return args
}

// programResilient installs bgpd's routes inside within as resilient
// nexthop groups over the load-balancer hosts' nexthops (id i+1 for
// lbs[i], cluster.Network's), every 200 ms until ctx ends: a group is
// made when its address is first announced, changed in place when its
// members change (only a leaving member's buckets move; a member added
// gets idle buckets only, and with unbalanced set the others' too once
// the group has been unbalanced that long), and removed with its route
// when the address is withdrawn by every node. It returns when ctx ends.
func (f *FRR) programResilient(ctx context.Context, within netip.Prefix, hosts []netip.Addr, unbalanced time.Duration) {
	index := map[netip.Addr]int{}
	for i, h := range hosts {
		index[h] = i
	}
	groups := map[netip.Prefix]int{}       // address -> its group's id
	programmed := map[netip.Prefix][]int{} // address -> member hosts
	next := resilientBase
	ns := f.host.Name
	run := func(args ...string) error {
		return supervisor.Run(ctx, supervisor.Command{Name: "ip", Args: append([]string{"-n", ns}, args...)})
	}
	for traffic.SleepCtx(ctx, 200*time.Millisecond) {
		rib, err := f.RIB(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.logf("router: read bgpd's table: %v", err)
			}
			continue
		}
		for p, hops := range rib {
			if !within.Overlaps(p) || p.Bits() < within.Bits() {
				continue
			}
			var members []int
			for _, h := range hops {
				if i, ok := index[h]; ok {
					members = append(members, i)
				}
			}
			slices.Sort(members)
			if len(members) == 0 || slices.Equal(members, programmed[p]) {
				continue
			}
			group := resilientGroup(members, unbalanced)
			id, ok := groups[p]
			var err error
			if ok {
				err = run(append([]string{"nexthop", "replace", "id", strconv.Itoa(id)}, group...)...)
			} else {
				id = next
				next++
				if err = run(append([]string{"nexthop", "add", "id", strconv.Itoa(id)}, group...)...); err == nil {
					groups[p] = id
				}
			}
			if err == nil {
				// Every time: a route that failed once is put in place
				// by the next round.
				err = run("route", "replace", p.String(), "nhid", strconv.Itoa(id))
			}
			if err != nil {
				if ctx.Err() == nil {
					f.logf("router: program %s over hosts %v: %v", p, members, err)
				}
				continue
			}
			f.logf("router: %s over hosts %v (resilient group %d)", p, members, groups[p])
			programmed[p] = members
		}
		for p, id := range groups {
			if _, ok := rib[p]; ok {
				continue
			}
			err := run("route", "del", p.String())
			if err == nil {
				err = run("nexthop", "del", "id", strconv.Itoa(id))
			}
			if err != nil {
				if ctx.Err() == nil {
					f.logf("router: withdraw %s: %v", p, err)
				}
				continue
			}
			f.logf("router: %s withdrawn by every node", p)
			delete(groups, p)
			delete(programmed, p)
		}
	}
}

// kernelBucket is one object of `ip -j nexthop bucket show`.
type kernelBucket struct {
	ID     int `json:"id"`
	Bucket struct {
		Index int `json:"index"`
		NHID  int `json:"nhid"`
	} `json:"bucket"`
}

// Buckets is how many of the buckets of addr's resilient nexthop group in
// namespace ns each next hop holds: each one's share of the hash space, so
// of new connections. Empty when addr's route is not through a resilient
// group (zebra's multipath route, frr-ecmp).
func Buckets(ctx context.Context, ns string, addr netip.Addr) (map[netip.Addr]int, error) {
	var routes []kernelRoute
	if err := ipJSON(ctx, ns, &routes, "route", "show", addr.String()+"/32"); err != nil {
		return nil, err
	}
	var objs []kernelNexthop
	if err := ipJSON(ctx, ns, &objs, "nexthop", "show"); err != nil {
		return nil, err
	}
	group := 0
	for _, r := range routes {
		if r.NHID != 0 && slices.ContainsFunc(objs, func(o kernelNexthop) bool { return o.ID == r.NHID && o.Type == "resilient" }) {
			group = r.NHID
		}
	}
	if group == 0 {
		return map[netip.Addr]int{}, nil
	}
	var buckets []kernelBucket
	if err := ipJSON(ctx, ns, &buckets, "nexthop", "bucket", "show", "id", strconv.Itoa(group)); err != nil {
		return nil, err
	}
	return bucketCounts(buckets, objs), nil
}

// bucketCounts is Buckets from what `ip -j nexthop bucket show id N` and
// `ip -j nexthop show` said: each bucket's next hop resolved to its
// gateway.
func bucketCounts(buckets []kernelBucket, objs []kernelNexthop) map[netip.Addr]int {
	gw := map[int]netip.Addr{}
	for _, o := range objs {
		if a, err := netip.ParseAddr(o.Gateway); err == nil {
			gw[o.ID] = a
		}
	}
	out := map[netip.Addr]int{}
	for _, b := range buckets {
		if a, ok := gw[b.Bucket.NHID]; ok {
			out[a]++
		}
	}
	return out
}
