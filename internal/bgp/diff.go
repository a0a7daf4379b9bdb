package bgp

import (
	"net/netip"
	"slices"
)

// plan is what to change to go from the announced set to the desired one:
// the prefixes to announce (desired, not announced) and to withdraw
// (announced, not desired), each sorted and without duplicates. Prefixes
// present in both are left alone, which is what keeps one Service's change
// from touching another's path.
func plan(desired []netip.Prefix, announced map[netip.Prefix]struct{}) (add, del []netip.Prefix) {
	want := make(map[netip.Prefix]struct{}, len(desired))
	for _, p := range desired {
		p = p.Masked()
		if _, dup := want[p]; dup {
			continue
		}
		want[p] = struct{}{}
		if _, ok := announced[p]; !ok {
			add = append(add, p)
		}
	}
	for p := range announced {
		if _, ok := want[p]; !ok {
			del = append(del, p)
		}
	}
	slices.SortFunc(add, netip.Prefix.Compare)
	slices.SortFunc(del, netip.Prefix.Compare)
	return add, del
}
