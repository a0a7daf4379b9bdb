package model

import (
	"fmt"
	"net/netip"
	"strings"
)

// AddressMapping rewrites backend addresses inside From to the same host
// part inside To.
//
// It exists because the API server refuses loopback addresses in
// EndpointSlices, while zerodrop's tests and lab keep every packet on
// loopback: lab pods are published with addresses from the benchmarking range
// 198.18.0.0/15 and served on 127.18.0.0/15. It also fits a load balancer that
// reaches pods through a static NAT.
type AddressMapping struct {
	From, To netip.Prefix
}

// ParseAddressMap parses "FROM=TO[,FROM=TO…]" with prefixes of equal length.
func ParseAddressMap(s string) ([]AddressMapping, error) {
	var out []AddressMapping
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("address mapping %q: want FROM=TO", part)
		}
		f, err := netip.ParsePrefix(from)
		if err != nil {
			return nil, fmt.Errorf("address mapping %q: %w", part, err)
		}
		t, err := netip.ParsePrefix(to)
		if err != nil {
			return nil, fmt.Errorf("address mapping %q: %w", part, err)
		}
		if f.Bits() != t.Bits() || f.Addr().Is4() != t.Addr().Is4() {
			return nil, fmt.Errorf("address mapping %q: prefixes must be of one family and length", part)
		}
		out = append(out, AddressMapping{From: f.Masked(), To: t.Masked()})
	}
	return out, nil
}

// CanonicalIP spells an IP address one way (IPv6 has many spellings, and an
// IPv4-mapped one is its IPv4 address); other strings are kept as they are.
func CanonicalIP(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil {
		return a.Unmap().String()
	}
	return addr
}

// MapAddress applies the first mapping that contains addr.
func MapAddress(mappings []AddressMapping, addr string) string {
	if len(mappings) == 0 {
		return addr
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	for _, m := range mappings {
		if !m.From.Contains(a) {
			continue
		}
		src, base := a.AsSlice(), m.To.Addr().AsSlice()
		bits := m.From.Bits()
		for i := range src {
			// Keep the host bits of src, take the network bits of To.
			keep := byte(0xff)
			if n := bits - 8*i; n >= 8 {
				keep = 0
			} else if n > 0 {
				keep = 0xff >> n
			}
			src[i] = base[i]&^keep | src[i]&keep
		}
		out, _ := netip.AddrFromSlice(src)
		return out.String()
	}
	return addr
}
