package bgp

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestPlacement(t *testing.T) {
	a := netip.MustParseAddr
	l := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, a(x))
		}
		return out
	}
	for _, tc := range []struct {
		desc                    string
		want, onLink, elsewhere []netip.Addr
		wantAdd, wantDel        []netip.Addr
	}{
		{desc: "nothing anywhere"},
		{desc: "new addresses are added, sorted, once", want: l("203.0.113.9", "203.0.113.2", "203.0.113.9"),
			wantAdd: l("203.0.113.2", "203.0.113.9")},
		{desc: "on the link already: left alone", want: l("203.0.113.2"), onLink: l("203.0.113.2")},
		{desc: "on another interface (the user's lo): not added", want: l("203.0.113.2"), elsewhere: l("203.0.113.2")},
		{desc: "on another interface and not wanted: never removed", elsewhere: l("203.0.113.2", "10.0.0.5")},
		{desc: "on the link and not wanted: removed", want: l("203.0.113.2"), onLink: l("203.0.113.2", "203.0.113.3", "203.0.113.1"),
			wantDel: l("203.0.113.1", "203.0.113.3")},
		{desc: "on the link and on lo, wanted: kept", want: l("203.0.113.2"), onLink: l("203.0.113.2"), elsewhere: l("203.0.113.2")},
		{desc: "on the link and on lo, not wanted: removed from the link only", onLink: l("203.0.113.2"), elsewhere: l("203.0.113.2"),
			wantDel: l("203.0.113.2")},
		{desc: "IPv6 is never added", want: l("2001:db8::1", "203.0.113.2"), wantAdd: l("203.0.113.2")},
		{desc: "one Service gone among many: only its address moves", want: l("203.0.113.1", "203.0.113.3", "203.0.113.4"),
			onLink: l("203.0.113.1", "203.0.113.2", "203.0.113.3"), wantAdd: l("203.0.113.4"), wantDel: l("203.0.113.2")},
	} {
		add, del := placement(tc.want, tc.onLink, tc.elsewhere)
		if !slices.Equal(add, tc.wantAdd) || !slices.Equal(del, tc.wantDel) {
			t.Errorf("%s: add %v, del %v; want add %v, del %v", tc.desc, add, del, tc.wantAdd, tc.wantDel)
		}
	}
}

func TestPlaceWanted(t *testing.T) {
	a := netip.MustParseAddr
	cands := []Candidate{{Address: a("203.0.113.3")}, {Address: a("2001:db8::1")}, {Address: a("203.0.113.1")}, {Address: a("203.0.113.3")}}
	checks := map[netip.Addr]Check{
		a("203.0.113.7"): {Announced: true}, // gone from the candidates, not yet withdrawn
		a("203.0.113.8"): {Successes: 4},    // gone, never announced
		a("203.0.113.1"): {Failures: 9},     // a candidate that fails: still placed
		a("2001:db8::2"): {Announced: true}, // IPv6 is never placed
	}
	got := placeWanted(cands, checks)
	want := []netip.Addr{a("203.0.113.1"), a("203.0.113.3"), a("203.0.113.7")}
	if !slices.Equal(got, want) {
		t.Errorf("placeWanted: %v, want %v", got, want)
	}
}

// placeRecorder is a Placer that keeps what it is asked to place and, as
// a link would, makes those addresses the node's for a checker reading
// placed.
type placeRecorder struct {
	calls  [][]netip.Addr
	placed map[netip.Addr]bool
	err    error
}

func (p *placeRecorder) Place(_ context.Context, want []netip.Addr) error {
	p.calls = append(p.calls, slices.Clone(want))
	if p.err != nil {
		return p.err
	}
	p.placed = set(want)
	return nil
}

// servedChecker passes an address that is placed and served.
type servedChecker struct {
	placer *placeRecorder
	served map[netip.Addr]bool
}

func (c servedChecker) Check(_ context.Context, cand Candidate) error {
	if !c.placer.placed[cand.Address] {
		return ErrNotLocal
	}
	if !c.served[cand.Address] {
		return errors.New("connection refused")
	}
	return nil
}

// failingSource fails until ok.
type failingSource struct {
	ok    bool
	cands []Candidate
}

func (f *failingSource) Candidates(context.Context) ([]Candidate, error) {
	if !f.ok {
		return nil, errors.New("the Services are not listed yet")
	}
	return f.cands, nil
}

// TestAnnouncerPlaces: nothing is placed (so nothing removed) before the
// candidates were read once; the addresses are placed before the round's
// checks, so a new Service is announced in its first round; an address
// placed but not served is not announced; a Service gone is withdrawn
// first and its address removed the round after; a source that fails
// later keeps the last list placed.
func TestAnnouncerPlaces(t *testing.T) {
	ctx := context.Background()
	a := netip.MustParseAddr
	served, unserved := a("203.0.113.1"), a("203.0.113.2")
	src := &failingSource{cands: []Candidate{{Address: served, Ports: []uint16{80}}, {Address: unserved, Ports: []uint16{80}}}}
	pl := &placeRecorder{}
	rec := &recorder{}
	an, err := NewAnnouncer(AnnouncerConfig{
		Speaker: rec, Candidates: src, Placer: pl,
		Checker: servedChecker{placer: pl, served: map[netip.Addr]bool{served: true}},
		Rules:   Rules{FallCount: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pl.calls) != 0 {
		t.Fatalf("placed %v before the candidates were read", pl.calls)
	}
	src.ok = true
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pl.calls[len(pl.calls)-1]; !slices.Equal(got, []netip.Addr{served, unserved}) {
		t.Errorf("placed %v, want both candidates", got)
	}
	if got, want := rec.last(), []netip.Prefix{netip.PrefixFrom(served, 32)}; !slices.Equal(got, want) {
		t.Errorf("first listed round announced %v, want %v (the unserved address placed but not announced)", got, want)
	}

	// The served Service is deleted: withdrawn at once, its address kept
	// for this round and removed at the next.
	src.cands = src.cands[1:]
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); len(got) != 0 {
		t.Errorf("after the Service's deletion announced %v, want nothing", got)
	}
	if got := pl.calls[len(pl.calls)-1]; !slices.Equal(got, []netip.Addr{served, unserved}) {
		t.Errorf("the round that withdraws placed %v, want the withdrawn address kept", got)
	}
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pl.calls[len(pl.calls)-1]; !slices.Equal(got, []netip.Addr{unserved}) {
		t.Errorf("the round after the withdrawal placed %v, want %v", got, unserved)
	}

	// The source fails: the last list stays placed.
	src.ok = false
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pl.calls[len(pl.calls)-1]; !slices.Equal(got, []netip.Addr{unserved}) {
		t.Errorf("with the source failing placed %v, want the last list %v", got, unserved)
	}

	// A placement that fails does not stop the round: what is not placed
	// is not local, so not announced.
	src.ok = true
	src.cands = []Candidate{{Address: served, Ports: []uint16{80}}}
	pl.err = errors.New("operation not permitted")
	pl.placed = nil
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); len(got) != 0 {
		t.Errorf("with the placement failing announced %v, want nothing", got)
	}
}
