package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
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

// TestResilientGroup: the programmer's group arguments name the members'
// nexthop ids in order, 64 buckets, and the unbalanced timer in whole
// seconds only when one is set.
func TestResilientGroup(t *testing.T) {
	for _, tc := range []struct {
		members    []int
		unbalanced time.Duration
		want       string
	}{
		{[]int{0, 2}, 0, "group 1/3 type resilient buckets 64"},
		{[]int{0, 1, 2}, 10 * time.Second, "group 1/2/3 type resilient buckets 64 unbalanced_timer 10"},
		{[]int{1}, time.Second, "group 2 type resilient buckets 64 unbalanced_timer 1"},
	} {
		if got := strings.Join(resilientGroup(tc.members, tc.unbalanced), " "); got != tc.want {
			t.Errorf("resilientGroup(%v, %s) = %q, want %q", tc.members, tc.unbalanced, got, tc.want)
		}
	}
}

// TestBucketCounts counts a resilient group's buckets per gateway, as
// `ip -j nexthop bucket show` prints them; a bucket of an unknown nexthop
// counts for none.
func TestBucketCounts(t *testing.T) {
	const objects = `[{"id":1,"gateway":"198.18.1.2","dev":"eth0","scope":"link","flags":[]},
		{"id":2,"gateway":"198.18.1.5","dev":"eth0","scope":"link","flags":[]},
		{"id":1000,"group":[{"id":1},{"id":2}],"type":"resilient","flags":[]}]`
	const buckets = `[{"id":1000,"bucket":{"index":0,"idle_time":3.1,"nhid":1},"flags":[]},
		{"id":1000,"bucket":{"index":1,"idle_time":0.2,"nhid":2},"flags":[]},
		{"id":1000,"bucket":{"index":2,"idle_time":7,"nhid":2},"flags":[]},
		{"id":1000,"bucket":{"index":3,"idle_time":7,"nhid":9},"flags":[]}]`
	var objs []kernelNexthop
	var bs []kernelBucket
	if err := json.Unmarshal([]byte(objects), &objs); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(buckets), &bs); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]int{netip.MustParseAddr("198.18.1.2"): 1, netip.MustParseAddr("198.18.1.5"): 2}
	if d := cmp.Diff(want, bucketCounts(bs, objs), cmpopts.EquateComparable(netip.Addr{})); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
}

// kernelNetns makes a network namespace of the test's own with a veth
// (v0, 10.77.0.1/24) and nexthop objects 1 to 3 via 10.77.0.2 to .4, and
// returns its name and a runner of `ip -n NAME ...`. It skips without
// root or iproute2.
func kernelNetns(t *testing.T, ctx context.Context, name string) (string, func(args ...string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	ns := netlab.OwnName(name)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	in := func(args ...string) { t.Helper(); ip(append([]string{"-n", ns}, args...)...) }
	for _, c := range []string{"link add v0 type veth peer name v1", "link set lo up", "link set v0 up", "link set v1 up",
		"addr add 10.77.0.1/24 dev v0", "nexthop add id 1 via 10.77.0.2 dev v0", "nexthop add id 2 via 10.77.0.3 dev v0",
		"nexthop add id 3 via 10.77.0.4 dev v0"} {
		in(strings.Fields(c)...)
	}
	return ns, in
}

// TestResilientUnbalancedKernel asks this machine's kernel: two resilient
// groups made by the programmer's arguments over members 1 and 2, one
// with a 1 s unbalanced timer and one without, every bucket of both made
// busy (route lookups of 2,000 flows hashed on ports, as the lab's router
// hashes: a lookup marks the bucket it hits as used, and a bucket not used
// since it was last given a member counts as idle), get member 3 added; the
// group with the timer gives member 3 its share of the 64 buckets (21)
// though none is idle (the idle timer is 120 s), and the group without
// still gives it none by then.
func TestResilientUnbalancedKernel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, in := kernelNetns(t, ctx, "unbal-test")
	timed, plain := netip.MustParseAddr("10.79.0.1"), netip.MustParseAddr("10.79.0.2")
	for id, g := range map[string][]string{"1000": resilientGroup([]int{0, 1}, time.Second), "1001": resilientGroup([]int{0, 1}, 0)} {
		in(append([]string{"nexthop", "add", "id", id}, g...)...)
	}
	in("route", "add", timed.String()+"/32", "nhid", "1000")
	in("route", "add", plain.String()+"/32", "nhid", "1001")
	in("addr", "add", "10.78.0.1/32", "dev", "lo")
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	var b strings.Builder
	for _, dst := range []netip.Addr{timed, plain} {
		for i := range 2000 {
			fmt.Fprintf(&b, "route get %s from 10.78.0.1 ipproto tcp sport %d dport 80\n", dst, 20000+i)
		}
	}
	batch := filepath.Join(t.TempDir(), "get.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", batch).CombinedOutput(); err != nil {
		t.Fatalf("route get: %v: %s", err, out)
	}
	added := netip.MustParseAddr("10.77.0.4")
	in(append([]string{"nexthop", "replace", "id", "1000"}, resilientGroup([]int{0, 1, 2}, time.Second)...)...)
	in(append([]string{"nexthop", "replace", "id", "1001"}, resilientGroup([]int{0, 1, 2}, 0)...)...)
	var got map[netip.Addr]int
	// 20 s: twenty times the timer, and a sixth of the idle timer.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		var err error
		if got, err = Buckets(ctx, ns, timed); err != nil {
			t.Fatal(err)
		}
		if got[added] >= resilientBuckets/3 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got[added] < resilientBuckets/3 {
		t.Fatalf("with a 1 s unbalanced timer, the member added holds %d buckets (%v), want at least %d", got[added], got, resilientBuckets/3)
	}
	plainGot, err := Buckets(ctx, ns, plain)
	if err != nil {
		t.Fatal(err)
	}
	if n := plainGot[added]; n != 0 || len(plainGot) != 2 {
		t.Errorf("without an unbalanced timer, the buckets are %v: want the member added to hold none while no bucket is idle", plainGot)
	}
}
