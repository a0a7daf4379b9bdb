package bgp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
)

// addrLinkChild marks the test process that runs inside the namespace.
const addrLinkChild = "ZERODROP_ADDRLINK_NETNS"

// TestAddressLinkNetns runs the announcer with its AddressLink and the
// real local check in a network namespace of its own (the test binary runs
// itself again there): the link is created and brought up; the candidates'
// addresses are placed on it, except one the node's configuration already
// has on lo; an address on the link that nothing serves is not announced,
// those served are; a Service gone is withdrawn and then its address
// removed from the link, while an address on lo no longer a candidate stays
// on lo; a new announcer (a restarted speaker) keeps what the link holds;
// a deleted link is made again. What is on which link is read with `ip -j
// addr`, not through the code under test.
func TestAddressLinkNetns(t *testing.T) {
	if os.Getenv(addrLinkChild) != "" {
		addressLinkInNetns(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("the address-link test makes a network namespace and needs root")
	}
	ns := fmt.Sprintf("%s-%d-addr", routerName, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run", "^TestAddressLinkNetns$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), addrLinkChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test in the namespace failed: %v", err)
	}
}

func addressLinkInNetns(t *testing.T) {
	ctx := context.Background()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	served, unserved, onLo := a("203.0.113.1"), a("203.0.113.2"), a("203.0.113.3")
	// The node's own configuration: onLo on lo, before the speaker.
	if err := netlink.AddrAdd(lo, hostAddr(onLo)); err != nil {
		t.Fatal(err)
	}
	port := uint16(8080)
	src := &failingSource{ok: true, cands: []Candidate{
		{Address: served, Ports: []uint16{port}}, {Address: unserved, Ports: []uint16{port}}, {Address: onLo, Ports: []uint16{port}},
	}}
	link := &AddressLink{Name: DefaultAddressLink}
	newAnnouncer := func(rec *recorder) *Announcer {
		an, err := NewAnnouncer(AnnouncerConfig{Speaker: rec, Candidates: src, Placer: link, Rules: Rules{FallCount: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return an
	}
	rec := &recorder{}
	an := newAnnouncer(rec)
	step := func(what string) {
		t.Helper()
		if err := an.Step(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("first round")
	if got := rec.last(); len(got) != 0 {
		t.Errorf("nothing listens yet, announced %v", got)
	}
	kind, up, addrs := readLinks(t)
	if kind != "dummy" && kind != "bridge" {
		t.Errorf("link %s: kind %q, want dummy (or bridge where the kernel has no dummy links)", DefaultAddressLink, kind)
	}
	if !up {
		t.Errorf("link %s is not up", DefaultAddressLink)
	}
	t.Logf("link %s: %s", DefaultAddressLink, kind)
	want := map[string][]netip.Addr{"lo": {a("127.0.0.1"), onLo}, DefaultAddressLink: {served, unserved}}
	if !equalLinks(addrs, want) {
		t.Errorf("after the first round: %v, want %v", addrs, want)
	}

	// HAProxy serves two of the three: they are announced, the third is
	// on the link and not announced.
	for _, addr := range []netip.Addr{served, onLo} {
		ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
		if err != nil {
			t.Fatalf("listen on %s (placed?): %v", addr, err)
		}
		defer ln.Close()
	}
	step("served")
	if got, want := rec.last(), []netip.Prefix{netip.PrefixFrom(served, 32), netip.PrefixFrom(onLo, 32)}; !slices.Equal(got, want) {
		t.Errorf("announced %v, want %v (not %s: on the link, not served)", got, want, unserved)
	}

	// The Services of served and onLo are deleted: withdrawn, then
	// served's address leaves the link; onLo stays on lo.
	src.cands = src.cands[1:2]
	step("deleted, withdrawn")
	if got := rec.last(); len(got) != 0 {
		t.Errorf("after the deletions announced %v, want nothing", got)
	}
	step("deleted, removed")
	_, _, addrs = readLinks(t)
	want = map[string][]netip.Addr{"lo": {a("127.0.0.1"), onLo}, DefaultAddressLink: {unserved}}
	if !equalLinks(addrs, want) {
		t.Errorf("after the deletions: %v, want %v", addrs, want)
	}

	// A restarted speaker: a new announcer whose first list has one more
	// address keeps what the link holds and adds the new one.
	src.cands = append(src.cands, Candidate{Address: served, Ports: []uint16{port}})
	an = newAnnouncer(&recorder{})
	step("restarted")
	_, _, addrs = readLinks(t)
	want[DefaultAddressLink] = []netip.Addr{served, unserved}
	if !equalLinks(addrs, want) {
		t.Errorf("after a restart: %v, want %v", addrs, want)
	}

	// Someone deletes the link: the next round makes it again.
	if out, err := exec.Command("ip", "link", "del", DefaultAddressLink).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	step("link deleted")
	_, up, addrs = readLinks(t)
	if !up || !equalLinks(addrs, want) {
		t.Errorf("after the link's deletion: up %t, %v, want up and %v", up, addrs, want)
	}
}

// readLinks reads, with `ip -j -d addr`, the address link's kind and
// whether it is up, and every link's IPv4 addresses, by link name.
func readLinks(t *testing.T) (kind string, up bool, addrs map[string][]netip.Addr) {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-d", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip -j addr: %v", err)
	}
	var links []struct {
		Name     string   `json:"ifname"`
		Flags    []string `json:"flags"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
		Addrs []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		t.Fatalf("ip -j addr: %v: %s", err, out)
	}
	addrs = map[string][]netip.Addr{}
	for _, l := range links {
		if l.Name == DefaultAddressLink {
			kind, up = l.LinkInfo.Kind, slices.Contains(l.Flags, "UP")
		}
		for _, ad := range l.Addrs {
			if ad.Family == "inet" {
				addrs[l.Name] = append(addrs[l.Name], netip.MustParseAddr(ad.Local))
			}
		}
		slices.SortFunc(addrs[l.Name], netip.Addr.Compare)
	}
	return kind, up, addrs
}

func equalLinks(got, want map[string][]netip.Addr) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			return false
		}
	}
	return true
}
