package azuredp

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The ruleset (docs/azure-dataplane.md describes it in full), in two
// tables of the load-balancer namespace, both named azuredp: netdev
// azuredp, on the device's ingress, for floating-IP rules — the backend
// answers the client directly, so conntrack, which needs both directions,
// cannot track these flows: a flows map keyed by the 4-tuple with the
// rule's idle timeout does, as Azure's flow table does, and each packet is
// forwarded unchanged (`fwd`); and ip azuredp, with conntrack, which DNATs
// the rules without floating IP. Each programming replaces every chain,
// rule and element in one nft transaction and never flushes the flows map
// or conntrack: that is what keeps established flows on their backend.
// With Config.PoolFlows reset, an established flow whose backend left the
// rule's pools is answered with a TCP reset at its next packet (a backend
// probed down or admin Down is still in the pools: its flows continue).

const (
	table    = "azuredp"
	flowsMap = "flows"
	nexthops = "nexthops"
	vipSet   = "vips"
	// maxFlows bounds the flows map; a new flow beyond it is dropped.
	maxFlows = 65536
	// device is the namespace's interface toward clients and backends.
	device = "eth0"
)

// setupScript creates both tables with their base chains, maps and sets;
// `create` fails if a table of that name exists (another data plane in the
// namespace).
func setupScript() string {
	return fmt.Sprintf(`create table netdev %[1]s
add map netdev %[1]s %[2]s { type ipv4_addr . inet_service . ipv4_addr . inet_service : mark; flags dynamic,timeout; size %[4]d; }
add map netdev %[1]s %[3]s { type mark : ipv4_addr; }
add chain netdev %[1]s ingress { type filter hook ingress device %[5]q priority 0; policy accept; }
create table ip %[1]s
add set ip %[1]s %[6]s { type ipv4_addr; }
add chain ip %[1]s pre { type filter hook prerouting priority mangle; policy accept; }
add chain ip %[1]s nat_pre { type nat hook prerouting priority dstnat; policy accept; }
add chain ip %[1]s nat_post { type nat hook postrouting priority srcnat; policy accept; }
`, table, flowsMap, nexthops, maxFlows, device, vipSet)
}

// ruleset is one programming's input.
type ruleset struct {
	rules    []rule
	eligible [][]netip.Addr // per rule
	marks    map[netip.Addr]uint32
	nexthops map[uint32]netip.Addr
	seed     uint32
	// resetRemoved: an established flow whose backend is no longer in the
	// rule's pools is answered with a TCP reset (Config.PoolFlows).
	resetRemoved bool
}

// chainSet names the regular chains of a programming, per table family.
type chainSet struct{ netdev, ip []string }

// render returns the transaction that replaces the previous programming
// (whose regular chains were old) with rs, and the chains it makes.
func render(rs ruleset, old chainSet) (string, chainSet) {
	var b strings.Builder
	var made chainSet
	var ingressMap, preMap, natMap []string
	var body []string // rules, after every chain exists
	for i, r := range rs.rules {
		elig := rs.eligible[i]
		key := fmt.Sprintf("%s . %d", r.Frontend, r.Port)
		if r.Floating {
			c, cNew := fmt.Sprintf("f_%d", i), fmt.Sprintf("f_%d_new", i)
			made.netdev = append(made.netdev, c, cNew)
			ingressMap = append(ingressMap, key+" : jump "+c)
			remember := fmt.Sprintf("update @%s { ip saddr . tcp sport . ip daddr . tcp dport timeout %ds : meta mark }",
				flowsMap, int(r.Idle.Seconds()))
			fwd := fmt.Sprintf("fwd ip to meta mark map @%s device %q", nexthops, device)
			body = append(body, fmt.Sprintf("add rule netdev %s %s tcp flags & (syn | ack) == syn goto %s", table, c, cNew))
			if rs.resetRemoved {
				// A flow whose backend left the pools: forgotten, and its
				// packet answered with a reset (a reply the backend never
				// sends through here, so the client learns it at once).
				body = append(body, fmt.Sprintf("add rule netdev %s %s meta mark set ip saddr . tcp sport . ip daddr . tcp dport map @%s %s"+
					"delete @%s { ip saddr . tcp sport . ip daddr . tcp dport : meta mark } reject with tcp reset",
					table, c, flowsMap, notIn("meta mark", memberMarks(r, rs.marks)), flowsMap))
			}
			body = append(body,
				fmt.Sprintf("add rule netdev %s %s meta mark set ip saddr . tcp sport . ip daddr . tcp dport map @%s %s %s", table, c, flowsMap, remember, fwd),
				fmt.Sprintf("add rule netdev %s %s drop", table, c))
			// A SYN is a new flow: it replaces what the map remembers of
			// its 4-tuple (a client reuses its ports within the idle
			// timeout), and `update` alone keeps an element's old backend,
			// so the flow's later packets followed a stale choice.
			forget := fmt.Sprintf("delete @%s { ip saddr . tcp sport . ip daddr . tcp dport : meta mark }", flowsMap)
			if len(elig) > 0 {
				body = append(body, fmt.Sprintf("add rule netdev %s %s meta mark set %s map { %s } %s %s %s",
					table, cNew, hashExpr(r, len(elig), rs.seed), markElems(elig, rs.marks), forget, remember, fwd))
			}
			body = append(body, fmt.Sprintf("add rule netdev %s %s drop", table, cNew))
			continue
		}
		d, n := fmt.Sprintf("d_%d", i), fmt.Sprintf("n_%d", i)
		made.ip = append(made.ip, d, n)
		preMap = append(preMap, key+" : goto "+d)
		natMap = append(natMap, key+" : goto "+n)
		if rs.resetRemoved {
			// A connection conntrack keeps on a backend that left the
			// pools: its client's packet is answered with a reset (before
			// the DNAT hook, so from the frontend's address).
			var addrs []string
			for _, b := range r.Backends {
				addrs = append(addrs, b.Addr.String())
			}
			// The reset is marked on the connection's entry, which the
			// data plane then deletes (conntrack.go): a client reusing the
			// 4-tuple later starts a new flow. A SYN that meets such an
			// entry before that is dropped (the client sends it again),
			// never reset.
			body = append(body,
				fmt.Sprintf("add rule ip %s %s tcp flags & (syn | ack) == syn ct mark 0x%x drop", table, d, resetMark),
				fmt.Sprintf("add rule ip %s %s ct state established %sct mark set 0x%x reject with tcp reset",
					table, d, notIn("ct reply ip saddr", addrs), resetMark))
		}
		body = append(body,
			fmt.Sprintf("add rule ip %s %s ct state established,related accept", table, d),
			// A connection conntrack does not know that does not start with
			// a SYN: dropped, as for floating IP.
			fmt.Sprintf("add rule ip %s %s tcp flags & (syn | ack) != syn drop", table, d))
		if len(elig) == 0 {
			body = append(body, fmt.Sprintf("add rule ip %s %s drop", table, d))
		} else {
			var addrs []string
			for j, a := range elig {
				addrs = append(addrs, fmt.Sprintf("%d : %s", j, a))
			}
			body = append(body, fmt.Sprintf("add rule ip %s %s dnat to %s map { %s } : %d",
				table, n, hashExpr(r, len(elig), rs.seed), strings.Join(addrs, ", "), r.BackendPort))
		}
		body = append(body, fmt.Sprintf("add rule ip %s %s accept", table, d))
	}
	// Flush what references the old chains, then the old chains, then delete
	// those not made again: nothing references them any more.
	for _, c := range []string{"netdev " + table + " ingress", "ip " + table + " pre", "ip " + table + " nat_pre"} {
		fmt.Fprintf(&b, "flush chain %s\n", c)
	}
	families := []struct {
		name      string
		old, made []string
	}{{"netdev", old.netdev, made.netdev}, {"ip", old.ip, made.ip}}
	for _, verb := range []string{"flush", "delete"} {
		for _, f := range families {
			for _, c := range f.old {
				if verb == "flush" || !slices.Contains(f.made, c) {
					fmt.Fprintf(&b, "%s chain %s %s %s\n", verb, f.name, table, c)
				}
			}
		}
	}
	fmt.Fprintf(&b, "flush map netdev %s %s\n", table, nexthops)
	if len(rs.nexthops) > 0 {
		var elems []string
		for _, m := range slices.Sorted(maps.Keys(rs.nexthops)) {
			elems = append(elems, fmt.Sprintf("0x%x : %s", m, rs.nexthops[m]))
		}
		fmt.Fprintf(&b, "add element netdev %s %s { %s }\n", table, nexthops, strings.Join(elems, ", "))
	}
	fmt.Fprintf(&b, "flush set ip %s %s\n", table, vipSet)
	var vips []string
	for _, r := range rs.rules {
		if s := r.Frontend.String(); !slices.Contains(vips, s) {
			vips = append(vips, s)
		}
	}
	if len(vips) > 0 {
		fmt.Fprintf(&b, "add element ip %s %s { %s }\n", table, vipSet, strings.Join(vips, ", "))
	}
	for _, f := range families {
		for _, c := range f.made {
			fmt.Fprintf(&b, "add chain %s %s %s\n", f.name, table, c)
		}
	}
	if len(ingressMap) > 0 {
		fmt.Fprintf(&b, "add rule netdev %s ingress ip protocol tcp ip daddr . tcp dport vmap { %s }\n", table, strings.Join(ingressMap, ", "))
	}
	if len(preMap) > 0 {
		fmt.Fprintf(&b, "add rule ip %s pre ip protocol tcp ip daddr . tcp dport vmap { %s }\n", table, strings.Join(preMap, ", "))
		fmt.Fprintf(&b, "add rule ip %s nat_pre ip protocol tcp ip daddr . tcp dport vmap { %s }\n", table, strings.Join(natMap, ", "))
	}
	// Anything else to a frontend address: dropped (ICMP is answered).
	fmt.Fprintf(&b, "add rule ip %s pre ip daddr @%s meta l4proto { tcp, udp } drop\n", table, vipSet)
	for _, l := range body {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String(), made
}

// hashExpr picks one of n eligible addresses by the rule's distribution:
// the 5-tuple by default (the protocol is always TCP here), source and
// destination address for SourceIP, and the protocol too for
// SourceIPProtocol (distribution-mode-concepts).
func hashExpr(r rule, n int, seed uint32) string {
	tuple := "ip saddr . tcp sport . ip daddr . tcp dport"
	switch r.Distribution {
	case armnetwork.LoadDistributionSourceIP:
		tuple = "ip saddr . ip daddr"
	case armnetwork.LoadDistributionSourceIPProtocol:
		tuple = "ip saddr . ip daddr . meta l4proto"
	}
	return fmt.Sprintf("jhash %s mod %d seed 0x%x", tuple, n, seed)
}

// notIn is the match "expr is none of elems", with a space after it; ""
// for no elements (nothing is one of them).
func notIn(expr string, elems []string) string {
	if len(elems) == 0 {
		return ""
	}
	return fmt.Sprintf("%s != { %s } ", expr, strings.Join(elems, ", "))
}

// memberMarks are the marks of a floating-IP rule's backends.
func memberMarks(r rule, marks map[netip.Addr]uint32) []string {
	var out []string
	for _, b := range r.Backends {
		out = append(out, fmt.Sprintf("0x%x", marks[b.Addr]))
	}
	return out
}

func markElems(addrs []netip.Addr, marks map[netip.Addr]uint32) string {
	var out []string
	for i, a := range addrs {
		out = append(out, fmt.Sprintf("%d : 0x%x", i, marks[a]))
	}
	return strings.Join(out, ", ")
}
