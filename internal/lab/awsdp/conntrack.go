package awsdp

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An NLB that resets a connection (its target unhealthy: "the load balancer
// sends a TCP RST for packets received on the client connections
// associated with the target", ELB docs, "Health checks for Network Load
// Balancer target groups") has ended it; what a later SYN of the same
// 4-tuple meets AWS does not document, and the data plane assumes TCP's
// answer: a new connection, balanced afresh. The
// data plane resets with nft's reject, whose reset conntrack does not
// track, so the connection's entry would stay established for the idle
// timeout, and the lab's one client, which reuses a source port within
// seconds (it opens hundreds of connections a second), had its new
// connection's SYN match that entry and answered with a reset: "connection
// refused", a failure no NLB makes. So the data plane deletes the entries
// of a reset target's connections one poll after it programmed the reset
// (the reject rule answers the packets of that poll, either direction: the
// reset's semantics); after that a packet of a forgotten connection is
// answered with a reset by the rule for unknown connections (client side),
// and a SYN is new. Meanwhile a SYN that matches the entry of such a
// connection, established before the reset, is dropped (render), not
// reset: the client sends it again.

// flowKey is a listener's connections to one target: original
// destination the frontend and port, reply source the target.
type flowKey struct {
	Frontend netip.AddrPort
	Target   netip.AddrPort
}

// resetKeys are the listeners' reset targets' flows.
func resetKeys(ls []listener) map[flowKey]bool {
	out := map[flowKey]bool{}
	for _, l := range ls {
		for _, t := range l.Targets {
			if t.Reset {
				out[flowKey{Frontend: netip.AddrPortFrom(l.Frontend, l.Port), Target: t.Addr}] = true
			}
		}
	}
	return out
}

// forgetFilter matches the conntrack entries of keys (TCP).
type forgetFilter map[flowKey]bool

func (f forgetFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_TCP {
		return false
	}
	fe, ok1 := netip.AddrFromSlice(flow.Forward.DstIP)
	t, ok2 := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok1 || !ok2 {
		return false
	}
	return f[flowKey{Frontend: netip.AddrPortFrom(fe.Unmap(), flow.Forward.DstPort), Target: netip.AddrPortFrom(t.Unmap(), flow.Reverse.SrcPort)}]
}

// forgetResets deletes the connection entries of the targets reset in the
// previous poll's programming and still reset in this one's (ls), once
// each (DataPlane.resetPrev and forgot, the program loop's).
func (d *DataPlane) forgetResets(ls []listener) error {
	now := resetKeys(ls)
	due := forgetFilter{}
	for k := range now {
		if d.resetPrev[k] && !d.forgot[k] {
			due[k] = true
		}
	}
	for k := range d.forgot {
		if !now[k] {
			delete(d.forgot, k) // in service again: its next reset counts anew
		}
	}
	d.resetPrev = now
	if len(due) == 0 {
		return nil
	}
	n, err := d.ns.DeleteConntrack(due)
	if err != nil {
		return fmt.Errorf("awsdp: forget the reset targets' connections: %w", err)
	}
	for k := range due {
		d.forgot[k] = true
	}
	d.logf("awsdp: forgot %d connections of reset targets %s", n, describeKeys(due))
	return nil
}

func describeKeys(f forgetFilter) string {
	var s []string
	for k := range f {
		s = append(s, k.Frontend.String()+"→"+k.Target.String())
	}
	return fmt.Sprint(s)
}
