package dataplane

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRouteHops reads the router's routes as `ip -j` prints them: zebra's
// multipath route (its nexthop object expanded in the route's dump), the
// lab's resilient group (resolved through the objects when the dump does
// not expand it), and what is not a route to the frontend range.
func TestRouteHops(t *testing.T) {
	const objects = `[{"id":1,"gateway":"198.18.1.2","dev":"eth0","scope":"link","flags":[]},
		{"id":2,"gateway":"198.18.1.5","dev":"eth0","scope":"link","flags":[]},
		{"id":1000,"group":[{"id":1},{"id":2}],"type":"resilient","flags":[]},
		{"id":1001,"group":[{"id":2}],"type":"resilient","flags":[]}]`
	within := netip.MustParsePrefix("198.18.128.0/17")
	a, b := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.18.1.5")
	for _, tc := range []struct {
		name, routes string
		want         map[netip.Prefix][]netip.Addr
	}{
		{"zebra's multipath route, next hops in the dump",
			`[{"dst":"198.18.129.1","nhid":118,"protocol":"bgp","metric":20,"flags":[],"nexthops":[{"gateway":"198.18.1.5","dev":"eth0","weight":1,"flags":[]},{"gateway":"198.18.1.2","dev":"eth0","weight":1,"flags":[]}]}]`,
			map[netip.Prefix][]netip.Addr{netip.MustParsePrefix("198.18.129.1/32"): {a, b}}},
		{"zebra's object gone between the two reads: the dump's next hops count",
			`[{"dst":"198.18.129.1","nhid":4242,"protocol":"bgp","flags":[],"nexthops":[{"gateway":"198.18.1.2"},{"gateway":"198.18.1.5"}]}]`,
			map[netip.Prefix][]netip.Addr{netip.MustParsePrefix("198.18.129.1/32"): {a, b}}},
		{"one next hop",
			`[{"dst":"198.18.129.3","gateway":"198.18.1.5","dev":"eth0","protocol":"bgp","flags":[]}]`,
			map[netip.Prefix][]netip.Addr{netip.MustParsePrefix("198.18.129.3/32"): {b}}},
		{"the lab's resilient groups, resolved through the objects",
			`[{"dst":"198.18.129.1","nhid":1000,"flags":[]},{"dst":"198.18.129.2","nhid":1001,"flags":[]}]`,
			map[netip.Prefix][]netip.Addr{netip.MustParsePrefix("198.18.129.1/32"): {a, b}, netip.MustParsePrefix("198.18.129.2/32"): {b}}},
		{"unreachable, outside the range, wider than it, or an unknown object: none",
			`[{"type":"unreachable","dst":"198.18.128.0/17","flags":[]},{"dst":"198.19.1.0/24","gateway":"198.18.0.11","dev":"eth0","flags":[]},
			  {"dst":"198.18.0.0/16","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"198.18.1.6","flags":[]},{"dst":"198.18.129.9","nhid":77,"flags":[]}]`,
			map[netip.Prefix][]netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var routes []kernelRoute
			var objs []kernelNexthop
			if err := json.Unmarshal([]byte(tc.routes), &routes); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(objects), &objs); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, routeHops(routes, objs, within), cmpopts.EquateComparable(netip.Addr{})); d != "" {
				t.Errorf("next hops (-want +got):\n%s", d)
			}
		})
	}
}
