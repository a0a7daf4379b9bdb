package dataplane

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

var (
	hopA = netip.MustParseAddr("198.18.1.2")
	hopB = netip.MustParseAddr("198.18.1.5")
	hopC = netip.MustParseAddr("198.18.1.6")
)

// TestHashThresholdMoved: with three equal members, the first or the last
// leaving moves half of the middle member's flows and none of the other's;
// the middle one leaving moves none of the others'; the member that leaves
// loses all of its own; nothing leaving moves nothing.
func TestHashThresholdMoved(t *testing.T) {
	abc := []netip.Addr{hopA, hopB, hopC}
	for _, tc := range []struct {
		name          string
		before, after []netip.Addr
		want          map[netip.Addr]float64
	}{
		{"first leaves", abc, []netip.Addr{hopB, hopC}, map[netip.Addr]float64{hopA: 1, hopB: 0.5, hopC: 0}},
		{"middle leaves", abc, []netip.Addr{hopA, hopC}, map[netip.Addr]float64{hopA: 0, hopB: 1, hopC: 0}},
		{"last leaves", abc, []netip.Addr{hopA, hopB}, map[netip.Addr]float64{hopA: 0, hopB: 0.5, hopC: 1}},
		{"none leaves", abc, abc, map[netip.Addr]float64{hopA: 0, hopB: 0, hopC: 0}},
		{"two members, the second leaves", []netip.Addr{hopA, hopB}, []netip.Addr{hopA}, map[netip.Addr]float64{hopA: 0, hopB: 1}},
		{"the order counts, not the address", []netip.Addr{hopC, hopB, hopA}, []netip.Addr{hopB, hopA}, map[netip.Addr]float64{hopC: 1, hopB: 0.5, hopA: 0}},
	} {
		got := HashThresholdMoved(tc.before, tc.after)
		if d := cmp.Diff(tc.want, got, cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) < 1e-9 })); d != "" {
			t.Errorf("%s: (-want +got)\n%s", tc.name, d)
		}
	}
}

// TestHashThresholdMovedKernel asks this machine's kernel, in a namespace
// of the test's own, where 600 TCP flows go through a route of three
// next hops (fib_multipath_hash_policy 1, as the lab's router) and then
// through the route without one of them, and checks that the share of
// each remaining member's flows that moved is HashThresholdMoved's within
// a tolerance. It needs root and iproute2; it skips without them.
func TestHashThresholdMovedKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := netlab.OwnName("hthr-test")
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, c := range []string{
		"link add v0 type veth peer name v1", "link set lo up", "link set v0 up", "link set v1 up",
		"addr add 10.77.0.1/24 dev v0", "addr add 10.78.0.1/32 dev lo",
	} {
		run(append([]string{"-n", ns}, strings.Fields(c)...)...)
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	hops := []netip.Addr{netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3"), netip.MustParseAddr("10.77.0.4")}
	const flows = 600
	where := func(members []netip.Addr) []netip.Addr {
		t.Helper()
		args := []string{"-n", ns, "route", "replace", "10.79.0.1/32"}
		for _, h := range members {
			args = append(args, "nexthop", "via", h.String(), "dev", "v0")
		}
		run(args...)
		var b strings.Builder
		for i := range flows {
			fmt.Fprintf(&b, "route get 10.79.0.1 from 10.78.0.1 ipproto tcp sport %d dport 80\n", 20000+i)
		}
		batch := filepath.Join(t.TempDir(), "get.batch")
		if err := os.WriteFile(batch, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", batch).CombinedOutput()
		if err != nil {
			t.Fatalf("route get: %v: %s", err, out)
		}
		var got []netip.Addr
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			for k := range f {
				if f[k] == "via" && k+1 < len(f) {
					got = append(got, netip.MustParseAddr(f[k+1]))
				}
			}
		}
		if len(got) != flows {
			t.Fatalf("route get answered %d of %d flows:\n%s", len(got), flows, out)
		}
		return got
	}
	for leave := range hops {
		after := append(append([]netip.Addr{}, hops[:leave]...), hops[leave+1:]...)
		before, then := where(hops), where(after)
		want := HashThresholdMoved(hops, after)
		for _, h := range after {
			on, moved := 0, 0
			for i := range flows {
				if before[i] == h {
					on++
					if then[i] != h {
						moved++
					}
				}
			}
			got := float64(moved) / float64(max(on, 1))
			if math.Abs(got-want[h]) > 0.12 {
				t.Errorf("%s leaves: %d of %d flows of %s moved (%.2f), predicted %.2f", hops[leave], moved, on, h, got, want[h])
			}
		}
	}
}

// TestFailureWindow: the window spans the failed attempts started at the
// event or later, as offsets from it; failures before it do not count,
// and those started once the router took the node out are counted apart.
func TestFailureWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, ok bool) Attempt {
		return Attempt{Start: t0.Add(time.Duration(ms) * time.Millisecond), OK: ok}
	}
	attempts := []Attempt{at(-500, false), at(0, true), at(200, false), at(400, true), at(6100, false), at(9000, true), at(9300, false), at(9500, true)}
	got := FailureWindow(attempts, t0, t0.Add(9200*time.Millisecond))
	want := Window{Attempts: 7, Failed: 3, First: 200 * time.Millisecond, Last: 9300 * time.Millisecond, FailedAfterQuiet: 1}
	if got != want {
		t.Errorf("FailureWindow = %+v, want %+v", got, want)
	}
	if got := FailureWindow([]Attempt{at(100, true)}, t0, time.Time{}); got != (Window{Attempts: 1}) {
		t.Errorf("no failure: %+v", got)
	}
}

// TestRouteOrder: the route's own next hops in their order, or its
// nexthop object's group members in the group's order (not sorted); an
// unreachable route has none.
func TestRouteOrder(t *testing.T) {
	own := []kernelRoute{{Dst: "198.18.129.1", Nexthops: []struct {
		Gateway string `json:"gateway"`
	}{{"198.18.1.6"}, {"198.18.1.2"}, {"198.18.1.5"}}}}
	if got, want := routeOrder(own, nil), []netip.Addr{hopC, hopA, hopB}; !slices.Equal(got, want) {
		t.Errorf("own next hops: %v, want %v", got, want)
	}
	objs := []kernelNexthop{{ID: 1, Gateway: "198.18.1.2"}, {ID: 2, Gateway: "198.18.1.5"}, {ID: 3, Gateway: "198.18.1.6"},
		{ID: 1000, Group: []struct {
			ID int `json:"id"`
		}{{3}, {1}}}}
	if got, want := routeOrder([]kernelRoute{{Dst: "198.18.129.1", NHID: 1000}}, objs), []netip.Addr{hopC, hopA}; !slices.Equal(got, want) {
		t.Errorf("group next hops: %v, want %v", got, want)
	}
	if got := routeOrder([]kernelRoute{{Type: "unreachable", Dst: "198.18.129.0/24"}}, objs); len(got) != 0 {
		t.Errorf("unreachable: %v", got)
	}
}

// TestClientPorts: only the connections from the client to the frontend.
func TestClientPorts(t *testing.T) {
	ss := `0      0      198.18.129.1:80   198.18.1.4:40001
0      0      198.18.129.1:80   198.18.1.4:40002
0      0      198.18.129.1:8080 198.18.1.4:40003
0      0      198.18.1.2:41000  198.18.1.4:80
0      0      198.18.129.1:80   198.18.1.9:40004
`
	got := clientPorts(ss, netip.MustParseAddr("198.18.1.4"), netip.MustParseAddrPort("198.18.129.1:80"))
	if want := []uint16{40001, 40002}; !slices.Equal(got, want) {
		t.Errorf("clientPorts = %v, want %v", got, want)
	}
}

// TestUplinkDropScript: nft accepts the script (check mode, nothing
// applied) in a namespace of the test's own.
func TestUplinkDropScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	ns := netlab.OwnName("uplink-test")
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ctx := context.Background()
	if err := FailUplink(ctx, ns); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", uplinkTable).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `iifname "eth0" drop`) || !strings.Contains(string(out), `oifname "eth0" drop`) {
		t.Errorf("the table as nft lists it (%v):\n%s", err, out)
	}
	if err := RestoreUplink(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", uplinkTable).Run(); err == nil {
		t.Errorf("the table is still there after RestoreUplink")
	}
}
