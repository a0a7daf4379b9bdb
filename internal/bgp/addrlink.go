package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultAddressLink is the name of the link the speaker puts the Service
// addresses on (`zerodrop speaker --address-link`).
const DefaultAddressLink = "zerodrop0"

// Placer puts the addresses the node may announce on the node, so that the
// kernel delivers their traffic to HAProxy and the local check (LocalDial)
// finds them. want is every address to keep; Place removes what it put
// there before and want no longer has.
type Placer interface {
	Place(ctx context.Context, want []netip.Addr) error
}

// AddressLink is the Placer of the speaker: a link of its own (a dummy link,
// created when missing) that holds each wanted IPv4 address as a /32.
//
// What it guarantees:
//   - It removes only addresses on its own link, never one on another
//     interface: Service addresses the node's own configuration put on lo
//     keep working, and an address already on another interface is not
//     added a second time.
//   - It never removes an address at a stop or a restart: HAProxy keeps
//     serving the established connections while the router, in graceful
//     restart, keeps the routes; the next speaker finds the addresses on
//     the link and keeps those it still wants.
//   - Every address on its link is its own: the link is the speaker's, and
//     an address put there by anything else is removed once no Service has
//     it.
//
// A kernel without dummy links (CONFIG_DUMMY unset, as on the lab's
// machines) gets a bridge without ports instead, which holds local
// addresses the same way and forwards nothing.
type AddressLink struct {
	// Name is the link's name; empty means DefaultAddressLink.
	Name   string
	Logger *slog.Logger
}

// Place implements Placer: it creates the link when missing, brings it up,
// adds the wanted addresses no interface has and removes the link's
// addresses no longer wanted.
func (l *AddressLink) Place(_ context.Context, want []netip.Addr) error {
	name := l.Name
	if name == "" {
		name = DefaultAddressLink
	}
	log := l.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	link, err := ensureLink(name, log)
	if err != nil {
		return err
	}
	all, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list the node's addresses: %w", err)
	}
	var onLink, elsewhere []netip.Addr
	for _, a := range all {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if a.LinkIndex == link.Attrs().Index {
			onLink = append(onLink, ip.Unmap())
		} else {
			elsewhere = append(elsewhere, ip.Unmap())
		}
	}
	add, del := placement(want, onLink, elsewhere)
	var errs []error
	for _, a := range add {
		if err := netlink.AddrReplace(link, hostAddr(a)); err != nil {
			errs = append(errs, fmt.Errorf("add %s to %s: %w", a, name, err))
			continue
		}
		log.Info("address added", "address", a, "link", name)
	}
	for _, a := range del {
		if err := netlink.AddrDel(link, hostAddr(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("remove %s from %s: %w", a, name, err))
			continue
		}
		log.Info("address removed", "address", a, "link", name)
	}
	return errors.Join(errs...)
}

// ensureLink returns the link name, created (a dummy, or a bridge without
// ports where the kernel has no dummy links) when missing and brought up
// when down: the kernel routes an address of a link that is down nowhere.
func ensureLink(name string, log *slog.Logger) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		attrs := netlink.LinkAttrs{Name: name}
		kind := "dummy"
		err = netlink.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
		if errors.Is(err, unix.EOPNOTSUPP) {
			kind = "bridge"
			err = netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create link %s (%s): %w", name, kind, err)
		}
		log.Info("link created", "link", name, "kind", kind)
		link, err = netlink.LinkByName(name)
	}
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return nil, fmt.Errorf("set link %s up: %w", name, err)
		}
	}
	return link, nil
}

func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}
}

// placement is what Place changes: the wanted IPv4 addresses neither on
// the link nor on another interface (add), and the link's addresses not
// wanted (del), each sorted without duplicates. An address on another
// interface is never the link's to add or remove.
func placement(want, onLink, elsewhere []netip.Addr) (add, del []netip.Addr) {
	wanted := set(want)
	linked := set(onLink)
	other := set(elsewhere)
	for a := range wanted {
		if a.Is4() && !linked[a] && !other[a] {
			add = append(add, a)
		}
	}
	for a := range linked {
		if !wanted[a] {
			del = append(del, a)
		}
	}
	slices.SortFunc(add, netip.Addr.Compare)
	slices.SortFunc(del, netip.Addr.Compare)
	return add, del
}

func set(l []netip.Addr) map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(l))
	for _, a := range l {
		m[a] = true
	}
	return m
}

// placeWanted is what the announcer keeps placed: every IPv4 candidate's
// address, and every address still announced (a Service gone from the
// candidates is withdrawn first; its address goes in the round after), sorted.
func placeWanted(cands []Candidate, checks map[netip.Addr]Check) []netip.Addr {
	var want []netip.Addr
	for _, c := range cands {
		if c.Address.Is4() {
			want = append(want, c.Address)
		}
	}
	for a, c := range checks {
		if c.Announced && a.Is4() {
			want = append(want, a)
		}
	}
	slices.SortFunc(want, netip.Addr.Compare)
	return slices.Compact(want)
}
