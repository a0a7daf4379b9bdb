package awsdp

import (
	"fmt"
	"slices"
	"strings"
)

// The ruleset, in one table of the load-balancer namespace, ip awsdp,
// with conntrack:
//
//   - pre (prerouting, after conntrack): first the connections to reset
//     (an established connection of a listener whose target is to be
//     reset, whichever direction the packet goes: the reset answers the
//     packet's sender; a SYN in such a connection's entry, a reused
//     4-tuple, is dropped until the entry is forgotten: conntrack.go);
//     then every established connection passes, which
//     is what keeps a connection on its target while the target drains
//     and after, until conntrack forgets it (the idle timeout); then,
//     for frontend addresses only: invalid packets are dropped, a TCP
//     packet that is not a SYN (a connection the data plane does not
//     know, for instance after the idle timeout) is answered with a
//     reset, and a SYN passes only to a listener with a target to take
//     it; anything else to a frontend is dropped.
//   - nat_pre (DNAT): a SYN to a listener goes to one of its receiving
//     targets, chosen by a hash of the 4-tuple (an NLB's flow hash).
//
// Each programming replaces every chain, rule and element in one nft
// transaction and never flushes conntrack.

const (
	table      = "awsdp"
	vipSet     = "vips"
	servingSet = "serving"
	// device is the namespace's interface toward clients and targets.
	device = "eth0"
)

// setupScript creates the table with its base chains and sets; `create`
// fails if a table of that name exists (another data plane there).
func setupScript() string {
	return fmt.Sprintf(`create table ip %[1]s
add set ip %[1]s %[2]s { type ipv4_addr; }
add set ip %[1]s %[3]s { type ipv4_addr . inet_service; }
add chain ip %[1]s pre { type filter hook prerouting priority mangle; policy accept; }
add chain ip %[1]s nat_pre { type nat hook prerouting priority dstnat; policy accept; }
add chain ip %[1]s nat_post { type nat hook postrouting priority srcnat; policy accept; }
`, table, vipSet, servingSet)
}

// render returns the transaction that replaces the previous programming
// (whose listener chains were old) with the model's listeners, and the
// chains it makes.
func render(listeners []listener, seed uint32, old []string) (string, []string) {
	var b strings.Builder
	var made, vmap, serving, vips, resets, dnats []string
	for i, l := range listeners {
		if s := l.Frontend.String(); !slices.Contains(vips, s) {
			vips = append(vips, s)
		}
		for _, t := range l.Targets {
			if t.Reset {
				// A SYN in such a connection's entry, once the connection
				// was established (assured), is a new flow of a reused
				// 4-tuple (conntrack.go): dropped until the entry is
				// forgotten, never reset. A handshake the turn cut (its
				// SYN-ACK reset) is not assured: the client's SYN again is
				// answered with the reset, unless the entry is forgotten by
				// then.
				flow := fmt.Sprintf("ct state established ct original ip daddr %s ct original proto-dst %d ct reply ip saddr %s ct reply proto-src %d",
					l.Frontend, l.Port, t.Addr.Addr(), t.Addr.Port())
				resets = append(resets,
					fmt.Sprintf("add rule ip %s pre tcp flags & (syn | ack) == syn %s ct status assured drop", table, flow),
					fmt.Sprintf("add rule ip %s pre meta l4proto tcp %s reject with tcp reset", table, flow))
			}
		}
		recv := l.receiving()
		if len(recv) == 0 {
			continue // no chain: its SYNs are dropped in pre
		}
		c := fmt.Sprintf("l_%d", i)
		made = append(made, c)
		key := fmt.Sprintf("%s . %d", l.Frontend, l.Port)
		serving = append(serving, key)
		vmap = append(vmap, key+" : goto "+c)
		var elems []string
		for j, a := range recv {
			elems = append(elems, fmt.Sprintf("%d : %s . %d", j, a.Addr(), a.Port()))
		}
		dnats = append(dnats, fmt.Sprintf("add rule ip %s %s dnat ip to jhash ip saddr . tcp sport . ip daddr . tcp dport mod %d seed 0x%x map { %s }",
			table, c, len(recv), seed, strings.Join(elems, ", ")))
	}
	// Flush what references the old chains, then the old chains, then
	// delete those not made again: nothing references them any more.
	fmt.Fprintf(&b, "flush chain ip %s pre\nflush chain ip %s nat_pre\n", table, table)
	for _, c := range old {
		fmt.Fprintf(&b, "flush chain ip %s %s\n", table, c)
	}
	for _, c := range old {
		if !slices.Contains(made, c) {
			fmt.Fprintf(&b, "delete chain ip %s %s\n", table, c)
		}
	}
	for _, s := range []struct {
		name  string
		elems []string
	}{{vipSet, vips}, {servingSet, serving}} {
		fmt.Fprintf(&b, "flush set ip %s %s\n", table, s.name)
		if len(s.elems) > 0 {
			fmt.Fprintf(&b, "add element ip %s %s { %s }\n", table, s.name, strings.Join(s.elems, ", "))
		}
	}
	for _, c := range made {
		fmt.Fprintf(&b, "add chain ip %s %s\n", table, c)
	}
	for _, r := range resets {
		b.WriteString(r + "\n")
	}
	fmt.Fprintf(&b, "add rule ip %s pre ct state established,related accept\n", table)
	fmt.Fprintf(&b, "add rule ip %s pre ip daddr != @%s accept\n", table, vipSet)
	fmt.Fprintf(&b, "add rule ip %s pre ct state invalid drop\n", table)
	fmt.Fprintf(&b, "add rule ip %s pre tcp flags & (syn | ack) != syn reject with tcp reset\n", table)
	fmt.Fprintf(&b, "add rule ip %s pre ip protocol tcp ip daddr . tcp dport @%s accept\n", table, servingSet)
	fmt.Fprintf(&b, "add rule ip %s pre meta l4proto { tcp, udp } drop\n", table)
	if len(vmap) > 0 {
		fmt.Fprintf(&b, "add rule ip %s nat_pre ip protocol tcp ip daddr . tcp dport vmap { %s }\n", table, strings.Join(vmap, ", "))
	}
	for _, r := range dnats {
		b.WriteString(r + "\n")
	}
	return b.String(), made
}
