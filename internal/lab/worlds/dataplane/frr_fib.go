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

// programResilient installs bgpd's routes inside within as resilient
// nexthop groups over the load-balancer hosts' nexthops (id i+1 for
// lbs[i], cluster.Network's), every 200 ms until ctx ends: a group is
// made when its address is first announced, changed in place when its
// members change (only a leaving member's buckets move; a member added
// gets idle buckets only), and removed with its route when the address is
// withdrawn by every node. It returns when ctx ends.
func (f *FRR) programResilient(ctx context.Context, within netip.Prefix, hosts []netip.Addr) {
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
			ids := make([]string, len(members))
			for k, i := range members {
				ids[k] = strconv.Itoa(i + 1)
			}
			group := []string{"group", strings.Join(ids, "/"), "type", "resilient", "buckets", "64"}
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
