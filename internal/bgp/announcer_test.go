package bgp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	a := netip.MustParseAddr
	p := func(s string) netip.Prefix { return netip.PrefixFrom(a(s), 32) }
	one := []Candidate{{Address: a("203.0.113.1"), Ports: []uint16{80}}}
	two := append([]Candidate{{Address: a("203.0.113.2"), Ports: []uint16{443}}}, one...)
	for _, tc := range []struct {
		desc    string
		rules   Rules
		cands   []Candidate
		checks  map[netip.Addr]Check
		leaving bool
		want    []netip.Prefix
	}{
		{desc: "never checked: not announced", cands: one},
		{desc: "one success announces (default rise 1)", cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 1}}, want: []netip.Prefix{p("203.0.113.1")}},
		{desc: "rise 2: one success is not enough", rules: Rules{RiseCount: 2}, cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 1}}},
		{desc: "rise 2: two successes announce", rules: Rules{RiseCount: 2}, cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 2}}, want: []netip.Prefix{p("203.0.113.1")}},
		{desc: "rise 2: announced stays through one success after a failure", rules: Rules{RiseCount: 2}, cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 1, Announced: true}}, want: []netip.Prefix{p("203.0.113.1")}},
		{desc: "announced, two failures (default fall 3): stays", cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Failures: 2, Announced: true}}, want: []netip.Prefix{p("203.0.113.1")}},
		{desc: "announced, three failures: withdrawn", cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Failures: 3, Announced: true}}},
		{desc: "fall 1: one failure withdraws", rules: Rules{FallCount: 1}, cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Failures: 1, Announced: true}}},
		{desc: "not announced, one failure: stays out", cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Failures: 1}}},
		{desc: "leaving withdraws everything", cands: two, leaving: true,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 5, Announced: true}, a("203.0.113.2"): {Successes: 1}}},
		{desc: "each address on its own checks, sorted", cands: two,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Failures: 3, Announced: true}, a("203.0.113.2"): {Successes: 1}},
			want:   []netip.Prefix{p("203.0.113.2")}},
		{desc: "both serving, sorted", cands: two,
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 1}, a("203.0.113.2"): {Successes: 1}},
			want:   []netip.Prefix{p("203.0.113.1"), p("203.0.113.2")}},
		{desc: "a check of an address no longer a candidate: not announced", cands: one,
			checks: map[netip.Addr]Check{a("203.0.113.2"): {Successes: 1, Announced: true}}},
		{desc: "IPv6 left out", cands: []Candidate{{Address: a("2001:db8::1"), Ports: []uint16{80}}},
			checks: map[netip.Addr]Check{a("2001:db8::1"): {Successes: 1}}},
		{desc: "an address listed twice is one prefix", cands: append(slices.Clone(one), one...),
			checks: map[netip.Addr]Check{a("203.0.113.1"): {Successes: 1}}, want: []netip.Prefix{p("203.0.113.1")}},
	} {
		got := Decide(tc.rules, tc.cands, tc.checks, tc.leaving)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.desc, got, tc.want)
		}
	}
}

func TestCheckRecord(t *testing.T) {
	var c Check
	for i, step := range []struct {
		ok   bool
		want Check
	}{
		{true, Check{Successes: 1}},
		{true, Check{Successes: 2}},
		{false, Check{Failures: 1}},
		{false, Check{Failures: 2}},
		{true, Check{Successes: 1}},
	} {
		c = c.Record(step.ok)
		if c != step.want {
			t.Fatalf("step %d (ok %t): %+v, want %+v", i, step.ok, c, step.want)
		}
	}
}

// recorder is a Setter that keeps every set it is given.
type recorder struct {
	mu   sync.Mutex
	sets [][]netip.Prefix
	err  error
}

func (r *recorder) Set(desired []netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, slices.Clone(desired))
	return r.err
}

func (r *recorder) last() []netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets[len(r.sets)-1]
}

// TestAnnouncerStep drives the loop one round at a time against a real
// listener on 127.0.0.1 (a local address) and checks what it hands the
// speaker: announced while the listener is open, withdrawn after FallCount
// failed connections and not before, announced again when it reopens, and
// an address that is not the node's is never announced even though
// something answers on it.
func TestAnnouncerStep(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	vip := netip.MustParseAddr("127.0.0.1")
	rec := &recorder{}
	leaving := false
	var checked []error
	an, err := NewAnnouncer(AnnouncerConfig{
		Speaker:    rec,
		Candidates: StaticCandidates{{Address: vip, Ports: []uint16{port}}},
		Leaving:    func() bool { return leaving },
		Interval:   time.Second,
		Rules:      Rules{FallCount: 2},
		Hooks:      Hooks{Checked: func(_ Candidate, err error, _ time.Duration) { checked = append(checked, err) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.PrefixFrom(vip, 32)}
	step := func(desc string, want []netip.Prefix) {
		t.Helper()
		if err := an.Step(ctx); err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		if got := rec.last(); !slices.Equal(got, want) {
			t.Fatalf("%s: set %v, want %v (last check: %v)", desc, got, want, checked[len(checked)-1])
		}
	}
	step("listener open", want)
	ln.Close()
	step("one refused connection (fall 2)", want)
	step("two refused connections", nil)
	ln, err = net.Listen("tcp", net.JoinHostPort(vip.String(), strconv.Itoa(int(port))))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	step("listener reopened", want)
	leaving = true
	step("leaving", nil)
	leaving = false
	step("back", want)

	// The router's side of a connection to a non-local address is not this
	// node; the check refuses it before dialing.
	if err := (LocalDial{Timeout: time.Second}).Check(ctx, Candidate{Address: netip.MustParseAddr("192.0.2.254"), Ports: []uint16{80}}); !errors.Is(err, ErrNotLocal) {
		t.Errorf("check of a non-local address: %v, want ErrNotLocal", err)
	}
}

func TestAnnouncerSpeakerRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rec := &recorder{err: errors.New("refused")}
	an, err := NewAnnouncer(AnnouncerConfig{Speaker: rec,
		Candidates: StaticCandidates{{Address: netip.MustParseAddr("127.0.0.1"), Ports: []uint16{uint16(ln.Addr().(*net.TCPAddr).Port)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := an.Step(context.Background()); err == nil {
		t.Fatal("a refused set was not reported")
	}
	if c := an.checks[netip.MustParseAddr("127.0.0.1")]; c.Announced || c.Successes != 1 {
		t.Errorf("after a refused set: %+v, want the success counted and not announced", c)
	}
}

func TestNewAnnouncerErrors(t *testing.T) {
	ok := AnnouncerConfig{Speaker: &recorder{}, Candidates: StaticCandidates{}}
	for _, tc := range []struct {
		desc string
		edit func(*AnnouncerConfig)
	}{
		{"no speaker", func(c *AnnouncerConfig) { c.Speaker = nil }},
		{"no candidates", func(c *AnnouncerConfig) { c.Candidates = nil }},
		{"check timeout over the interval", func(c *AnnouncerConfig) { c.Interval, c.CheckTimeout = time.Second, 2*time.Second }},
		{"interval too short", func(c *AnnouncerConfig) { c.Interval = time.Millisecond }},
	} {
		c := ok
		tc.edit(&c)
		if _, err := NewAnnouncer(c); err == nil {
			t.Errorf("%s: accepted", tc.desc)
		}
	}
	if _, err := NewAnnouncer(ok); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestLocalDialRound: the default check lists the node's addresses once a
// round however many candidates there are, with the behaviour of a listing
// per check: the local address that answers is announced (listed in its
// 16-byte form), the others fail as not local, and when the listing fails
// every check of the round fails with it.
func TestLocalDialRound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	vip := netip.MustParseAddr("127.0.0.1")
	cands := StaticCandidates{{Address: vip, Ports: []uint16{uint16(ln.Addr().(*net.TCPAddr).Port)}}}
	for i := range 200 {
		cands = append(cands, Candidate{Address: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), Ports: []uint16{80}})
	}
	var listings atomic.Int32
	var listErr error
	list := func() ([]net.Addr, error) {
		listings.Add(1)
		if listErr != nil {
			return nil, listErr
		}
		// net.ParseIP's IPv4 is 16 bytes long, as an interface's may be.
		return []net.Addr{&net.IPNet{IP: net.ParseIP(vip.String()), Mask: net.CIDRMask(8, 32)}}, nil
	}
	var mu sync.Mutex
	checked := map[netip.Addr]error{}
	rec := &recorder{}
	an, err := NewAnnouncer(AnnouncerConfig{Speaker: rec, Candidates: cands,
		Checker: LocalDial{Timeout: time.Second, interfaceAddrs: list},
		Rules:   Rules{FallCount: 1},
		Hooks: Hooks{Checked: func(c Candidate, err error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			checked[c.Address] = err
		}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, round := range []struct {
		desc    string
		listErr error
		want    []netip.Prefix
		wantErr func(netip.Addr) error // each candidate's check
	}{
		{"addresses listed", nil, []netip.Prefix{netip.PrefixFrom(vip, 32)}, func(a netip.Addr) error {
			if a == vip {
				return nil
			}
			return ErrNotLocal
		}},
		{"listing failed", errors.New("netlink dump interrupted"), nil, func(netip.Addr) error { return listErr }},
	} {
		listErr = round.listErr
		before := listings.Load()
		if err := an.Step(context.Background()); err != nil {
			t.Fatalf("%s: %v", round.desc, err)
		}
		if n := listings.Load() - before; n != 1 {
			t.Errorf("%s: the node's addresses listed %d times for %d candidates; want once", round.desc, n, len(cands))
		}
		if got := rec.last(); !slices.Equal(got, round.want) {
			t.Errorf("%s: set %v, want %v", round.desc, got, round.want)
		}
		if len(checked) != len(cands) {
			t.Errorf("%s: %d addresses checked, want %d", round.desc, len(checked), len(cands))
		}
		for a, err := range checked {
			if want := round.wantErr(a); !errors.Is(err, want) {
				t.Errorf("%s: check of %s: %v, want %v", round.desc, a, err, want)
				break
			}
		}
	}
}
