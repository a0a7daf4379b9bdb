package bgp

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPlan(t *testing.T) {
	p := netip.MustParsePrefix
	set := func(ps ...string) map[netip.Prefix]struct{} {
		m := map[netip.Prefix]struct{}{}
		for _, s := range ps {
			m[p(s)] = struct{}{}
		}
		return m
	}
	list := func(ps ...string) []netip.Prefix {
		var l []netip.Prefix
		for _, s := range ps {
			l = append(l, p(s))
		}
		return l
	}
	for _, tc := range []struct {
		desc             string
		desired          []netip.Prefix
		announced        map[netip.Prefix]struct{}
		wantAdd, wantDel []netip.Prefix
	}{
		{desc: "nothing", announced: set()},
		{desc: "first addresses", desired: list("10.0.0.2/32", "10.0.0.1/32"), announced: set(),
			wantAdd: list("10.0.0.1/32", "10.0.0.2/32")},
		{desc: "already announced is left alone", desired: list("10.0.0.1/32"), announced: set("10.0.0.1/32")},
		{desc: "one more leaves the others alone", desired: list("10.0.0.1/32", "10.0.0.3/32", "10.0.0.2/32"),
			announced: set("10.0.0.1/32", "10.0.0.2/32"), wantAdd: list("10.0.0.3/32")},
		{desc: "one fewer withdraws that one only", desired: list("10.0.0.1/32"),
			announced: set("10.0.0.1/32", "10.0.0.2/32"), wantDel: list("10.0.0.2/32")},
		{desc: "empty desired withdraws all", announced: set("10.0.0.2/32", "10.0.0.1/32"),
			wantDel: list("10.0.0.1/32", "10.0.0.2/32")},
		{desc: "duplicates are one path", desired: list("10.0.0.1/32", "10.0.0.1/32"), announced: set(),
			wantAdd: list("10.0.0.1/32")},
		{desc: "host bits are masked", desired: list("10.0.0.7/24"), announced: set("10.0.0.0/24")},
		{desc: "swap", desired: list("10.0.0.2/32"), announced: set("10.0.0.1/32"),
			wantAdd: list("10.0.0.2/32"), wantDel: list("10.0.0.1/32")},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			add, del := plan(tc.desired, tc.announced)
			cmpPrefix := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
			if d := cmp.Diff(tc.wantAdd, add, cmpPrefix, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("announce (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantDel, del, cmpPrefix, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("withdraw (-want +got):\n%s", d)
			}
		})
	}
}
