package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// A data-plane node leaving the router's multipath set, or failing hard
// behind it (issue 51's acceptance): what the lab predicts for each
// router hashing, and the means to measure it — which node's HAProxy holds
// each of the client's connections, the order of the router's next hops
// (hash-threshold's ranges follow it), and a node's uplink made to drop
// every packet while the link stays up.

// HashThresholdMoved is, for each member of before (the router's next
// hops in the kernel's order), the fraction of its flows that land on
// another member once the set is after: Linux's hash-threshold
// multipath (RFC 2992; fib_select_multipath and the nexthop objects'
// hthr groups) gives member i of n equal-weight members the hash range
// [i/n, (i+1)/n) and recomputes the ranges over the members that remain,
// so a member keeps only the part of its range that the new range of the
// same node overlaps. A member missing from after loses all its flows.
// Resilient groups are not this: their buckets stay with the members that
// remain, so only the missing member's flows move.
func HashThresholdMoved(before, after []netip.Addr) map[netip.Addr]float64 {
	out := map[netip.Addr]float64{}
	n, m := float64(len(before)), float64(len(after))
	for i, a := range before {
		j := slices.Index(after, a)
		if j < 0 {
			out[a] = 1
			continue
		}
		lo, hi := float64(i)/n, float64(i+1)/n
		kept := max(0, min(hi, float64(j+1)/m)-max(lo, float64(j)/m))
		out[a] = 1 - kept*n
	}
	return out
}

// Attempt is one new connection of a prober: when it started, and
// whether it was accepted.
type Attempt struct {
	Start time.Time
	OK    bool
}

// Window is the failure window of new connections after an event at
// From: the attempts that failed, the start of the first and of the last
// of them, as offsets from From (zero with none), and the attempts started
// after Quiet that failed (Quiet: when the lab saw the router take the
// failed node out; none should).
type Window struct {
	Attempts, Failed int
	First, Last      time.Duration
	FailedAfterQuiet int
}

// FailureWindow is the window of attempts started at from or later.
func FailureWindow(attempts []Attempt, from, quiet time.Time) Window {
	var w Window
	for _, a := range attempts {
		if a.Start.Before(from) {
			continue
		}
		w.Attempts++
		if a.OK {
			continue
		}
		d := a.Start.Sub(from)
		if w.Failed == 0 || d < w.First {
			w.First = d
		}
		w.Last = max(w.Last, d)
		w.Failed++
		if !quiet.IsZero() && !a.Start.Before(quiet) {
			w.FailedAfterQuiet++
		}
	}
	return w
}

// RouteOrder is the router's next hops for addr in the kernel's order —
// the route's own (the kernel expands a nexthop object into the route's
// dump), or its nexthop object's group members in the group's order —
// read in namespace ns: hash-threshold's ranges follow this order.
func RouteOrder(ctx context.Context, ns string, addr netip.Addr) ([]netip.Addr, error) {
	var routes []kernelRoute
	if err := ipJSON(ctx, ns, &routes, "route", "show", addr.String()+"/32"); err != nil {
		return nil, err
	}
	var objs []kernelNexthop
	if err := ipJSON(ctx, ns, &objs, "nexthop", "show"); err != nil {
		return nil, err
	}
	return routeOrder(routes, objs), nil
}

// routeOrder is RouteOrder from what `ip -j route show A/32` and `ip -j
// nexthop show` said: the first unicast route's gateways, in order.
func routeOrder(routes []kernelRoute, objs []kernelNexthop) []netip.Addr {
	for _, r := range routes {
		if r.Type != "" && r.Type != "unicast" {
			continue
		}
		gws := []string{r.Gateway}
		for _, nh := range r.Nexthops {
			gws = append(gws, nh.Gateway)
		}
		if r.NHID != 0 && r.Gateway == "" && len(r.Nexthops) == 0 {
			for _, o := range objs {
				if o.ID != r.NHID {
					continue
				}
				gws = append(gws, o.Gateway)
				for _, m := range o.Group {
					for _, x := range objs {
						if x.ID == m.ID {
							gws = append(gws, x.Gateway)
						}
					}
				}
			}
		}
		var out []netip.Addr
		for _, g := range gws {
			if a, err := netip.ParseAddr(g); err == nil && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		return out
	}
	return nil
}

// HeldBy reads, in each data-plane node's namespace (nodes: the node's
// address to its namespace's name), the established TCP connections to
// frontend from client, and returns the node holding each, by the
// client's port: which node's HAProxy took the connection.
func HeldBy(ctx context.Context, nodes map[netip.Addr]string, client netip.Addr, frontend netip.AddrPort) (map[uint16]netip.Addr, error) {
	out := map[uint16]netip.Addr{}
	for node, ns := range nodes {
		b, err := supervisor.Output(ctx, supervisor.Command{Name: "ss", Args: []string{"-N", ns, "-Htn", "state", "established", "dst", client.String()}})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ns, err)
		}
		for _, port := range clientPorts(string(b), client, frontend) {
			out[port] = node
		}
	}
	return out, nil
}

// clientPorts are the client's ports of the connections in ss's output
// (`ss -Htn state established`: Recv-Q, Send-Q, local, peer) whose local
// end is frontend and whose peer is client.
func clientPorts(ss string, client netip.Addr, frontend netip.AddrPort) []uint16 {
	var out []uint16
	for _, line := range strings.Split(ss, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		local, err1 := netip.ParseAddrPort(f[2])
		peer, err2 := netip.ParseAddrPort(f[3])
		if err1 != nil || err2 != nil || local != frontend || peer.Addr() != client {
			continue
		}
		out = append(out, peer.Port())
	}
	return out
}

// uplinkTable is the nftables table that fails a node hard.
const uplinkTable = "zerodrop_lab_uplink"

// uplinkDropScript drops every packet in and out of dev (the node's
// uplink) at the earliest hooks, the link itself staying up: the node's
// processes run on and see nothing but silence, as a node whose switch
// port or NIC died without the carrier dropping.
func uplinkDropScript(dev string) string {
	return fmt.Sprintf(`table inet %[1]s {
	chain in {
		type filter hook prerouting priority raw; policy accept;
		iifname %[2]q drop
	}
	chain out {
		type filter hook postrouting priority raw; policy accept;
		oifname %[2]q drop
	}
}
`, uplinkTable, dev)
}

// FailUplink makes the node of namespace ns drop every packet on its
// uplink (eth0, netlab's veth to the fabric), its link up: only the
// router's BGP hold time (or BFD) can notice. RestoreUplink undoes it.
func FailUplink(ctx context.Context, ns string) error {
	n := &netlab.Netns{Name: ns}
	return n.NFT(ctx, uplinkDropScript("eth0"))
}

// RestoreUplink removes FailUplink's table.
func RestoreUplink(ctx context.Context, ns string) error {
	n := &netlab.Netns{Name: ns}
	return n.Run(ctx, "nft", "delete", "table", "inet", uplinkTable)
}
