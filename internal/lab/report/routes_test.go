package report

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// hops is one read of the router: "A/32": "N1,N2", "" for no next hop.
func hops(m map[string]string) map[netip.Prefix][]netip.Addr {
	out := map[netip.Prefix][]netip.Addr{}
	for p, hs := range m {
		var as []netip.Addr
		for _, h := range strings.Split(hs, ",") {
			if h != "" {
				as = append(as, netip.MustParseAddr(h))
			}
		}
		out[netip.MustParsePrefix(p)] = as
	}
	return out
}

// TestRouteLog: successive reads of the router's next hops become one
// change per address whose set differs from the previous read's, with the
// nodes added (announced) and removed (withdrawn); an unchanged read or a
// reordered set is no change; an address gone from a read is withdrawn
// from every node.
func TestRouteLog(t *testing.T) {
	const a, b = "10.96.0.1/32", "10.96.0.2/32"
	const n1, n2, n3 = "10.0.1.2", "10.0.1.3", "10.0.1.4"
	type change struct {
		read                        int
		addr                        string
		after, announced, withdrawn []string
	}
	for _, tc := range []struct {
		name  string
		reads []map[string]string
		want  []change
	}{
		{"nothing routed", []map[string]string{{}, {}}, nil},
		{"first read announces what is routed", []map[string]string{{a: n1 + "," + n2}},
			[]change{{0, "10.96.0.1", []string{n1, n2}, []string{n1, n2}, nil}}},
		{"announced one by one, order ignored, then steady",
			[]map[string]string{{}, {a: n2}, {a: n2 + "," + n1}, {a: n1 + "," + n2}, {a: n1 + "," + n2}},
			[]change{{1, "10.96.0.1", []string{n2}, []string{n2}, nil}, {2, "10.96.0.1", []string{n1, n2}, []string{n1}, nil}}},
		{"a node leaves and returns",
			[]map[string]string{{a: n1 + "," + n2 + "," + n3}, {a: n1 + "," + n3}, {a: n1 + "," + n2 + "," + n3}},
			[]change{
				{0, "10.96.0.1", []string{n1, n2, n3}, []string{n1, n2, n3}, nil},
				{1, "10.96.0.1", []string{n1, n3}, nil, []string{n2}},
				{2, "10.96.0.1", []string{n1, n2, n3}, []string{n2}, nil},
			}},
		{"one node swapped for another in one read",
			[]map[string]string{{a: n1}, {a: n2}},
			[]change{{0, "10.96.0.1", []string{n1}, []string{n1}, nil}, {1, "10.96.0.1", []string{n2}, []string{n2}, []string{n1}}}},
		{"an address gone from the read is withdrawn, the other untouched",
			[]map[string]string{{a: n1, b: n1 + "," + n2}, {b: n1 + "," + n2}, {b: n1 + "," + n2}},
			[]change{
				{0, "10.96.0.1", []string{n1}, []string{n1}, nil},
				{0, "10.96.0.2", []string{n1, n2}, []string{n1, n2}, nil},
				{1, "10.96.0.1", []string{}, nil, []string{n1}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			var l RouteLog
			for i, r := range tc.reads {
				l.Read(start.Add(time.Duration(i)*200*time.Millisecond), hops(r))
			}
			var got []change
			for _, c := range l.From(start) {
				got = append(got, change{int(c.At * 5), c.Address, c.NextHops, c.Announced, c.Withdrawn})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("changes\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestRouteLogFromTrafficStart: a change's offset is from the traffic's
// start, negative before it.
func TestRouteLogFromTrafficStart(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var l RouteLog
	l.Read(start.Add(-1500*time.Millisecond), hops(map[string]string{"10.96.0.1/32": "10.0.1.2"}))
	l.Read(start.Add(2250*time.Millisecond), hops(map[string]string{"10.96.0.1/32": ""}))
	got := l.From(start)
	if len(got) != 2 || got[0].At != -1.5 || got[1].At != 2.25 || got[1].Time != "2026-01-02T03:04:07.250Z" {
		t.Errorf("changes %+v: want at -1.5 s and 2.25 s (03:04:07.250)", got)
	}
}

// TestHTMLDrawsRoutes: a run behind FRR has a header per address and a
// lane per node under it, an announcement mark for each node added within
// the traffic and a withdrawal mark for each removed, one before the
// traffic's start only colouring the lane; the JSON has every change; a
// run without routes draws no route lane and no route legend.
func TestHTMLDrawsRoutes(t *testing.T) {
	tl := func(routes []RouteChange) *Timeline {
		return &Timeline{Seconds: make([]traffic.Bucket, 10), Routes: routes}
	}
	routes := []RouteChange{
		{At: -3, Address: "10.96.0.1", NextHops: []string{"10.0.1.2", "10.0.1.3"}, Announced: []string{"10.0.1.2", "10.0.1.3"}},
		{At: 4.2, Address: "10.96.0.1", NextHops: []string{"10.0.1.2"}, Withdrawn: []string{"10.0.1.3"}},
		{At: 7.5, Address: "10.96.0.1", NextHops: []string{"10.0.1.2", "10.0.1.3"}, Announced: []string{"10.0.1.3"}},
	}
	for _, tc := range []struct {
		name                               string
		routes                             []RouteChange
		lanes, announces, withdraws, spans int
	}{
		{"none", nil, 0, 0, 0, 0},
		{"behind FRR", routes, 2, 1, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res := []Result{{Scenario: "rollout", Mode: "zerodrop", RouterRoutes: tc.routes, Timeline: tl(tc.routes)}}
			if err := WriteHTML(filepath.Join(dir, "lab.html"), res, []Mode{ModeZerodrop}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "lab.html"))
			if err != nil {
				t.Fatal(err)
			}
			page := string(b)
			for _, c := range []struct {
				what  string
				count int
				want  int
			}{
				{"lanes", strings.Count(page, `font-size="8">via 10.0.1.`), tc.lanes},
				{"address headers", strings.Count(page, `font-size="8">routes of 10.96.0.1<`), min(tc.lanes, 1)},
				{"announcements", strings.Count(page, `class="route-announce"`), tc.announces},
				{"withdrawals", strings.Count(page, `class="route-withdraw"`), tc.withdraws},
				{"routed spans", strings.Count(page, " routed from "), tc.spans},
				{"legend", strings.Count(page, "router routes:"), min(tc.lanes, 1)},
			} {
				if c.count != c.want {
					t.Errorf("%s: %d in the page, want %d", c.what, c.count, c.want)
				}
			}
			if tc.routes != nil && !strings.Contains(page, "<title>4.2s withdraw 10.96.0.1 via 10.0.1.3</title>") {
				t.Errorf("no withdrawal of 10.0.1.3 at 4.2 s in the page")
			}
			if err := WriteJSON(filepath.Join(dir, "lab.json"), Report{Scenarios: res}); err != nil {
				t.Fatal(err)
			}
			j, err := os.ReadFile(filepath.Join(dir, "lab.json"))
			if err != nil {
				t.Fatal(err)
			}
			var got Report
			if err := json.Unmarshal(j, &got); err != nil {
				t.Fatal(err)
			}
			if n := len(got.Scenarios[0].RouterRoutes); n != len(tc.routes) {
				t.Errorf("JSON: %d route changes, want %d", n, len(tc.routes))
			}
		})
	}
}

// TestRouteRows: the lanes are grouped under their address (in the order
// the addresses first change), nodes in the order they first appear, and
// past maxRouteLanes the rest is one line's count.
func TestRouteRows(t *testing.T) {
	ch := func(addr string, announced ...string) RouteChange {
		return RouteChange{Address: addr, Announced: announced}
	}
	var many []RouteChange
	for i := range maxRouteLanes + 3 {
		many = append(many, ch("10.96.0.1", netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}).String()))
	}
	for _, tc := range []struct {
		name    string
		changes []RouteChange
		want    string
	}{
		{"none", nil, ""},
		{"interleaved addresses",
			[]RouteChange{ch("10.96.0.2", "n2"), ch("10.96.0.1", "n1"), ch("10.96.0.2", "n1"), {Address: "10.96.0.1", Withdrawn: []string{"n1"}}},
			"[10.96.0.2] n2 n1 [10.96.0.1] n1"},
		{"too many", many, "[10.96.0.1] 10.0.1.0 10.0.1.1 10.0.1.2 10.0.1.3 10.0.1.4 10.0.1.5 10.0.1.6 10.0.1.7 +3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range routeRowsOf(tc.changes) {
				switch {
				case r.more > 0:
					got = append(got, fmt.Sprintf("+%d", r.more))
				case r.lane == nil:
					got = append(got, "["+r.header+"]")
				default:
					got = append(got, r.lane.hop)
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("rows %q, want %q", g, tc.want)
			}
		})
	}
}
