package report

import (
	"fmt"
	"html"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The router's routes over a run behind FRR (--router frr-ecmp or
// frr-resilient): each change of the next hops the router's kernel has
// for a Service address, read by the data plane's recorder
// (worlds/dataplane), in the JSON and drawn in the HTML on the run's time
// axis as announcements (a node added) and withdrawals (a node removed).

// RouteChange is one change of the router's next hops for one address, as
// the first read that saw it found them.
type RouteChange struct {
	// At is the change's offset from the traffic's start, in seconds
	// (negative: before it, during the run's setup); Time the same as a
	// timestamp. Both are those of the end of the read that first saw the
	// change: it happened at most a poll period and a read earlier.
	At      float64   `json:"at_seconds"`
	Time    string    `json:"time"`
	When    time.Time `json:"-"`
	Address string    `json:"address"`
	// NextHops are the address's next hops after the change, sorted
	// (empty: no node routes it any more); Announced and Withdrawn the
	// nodes added to and removed from them.
	NextHops  []string `json:"next_hops"`
	Announced []string `json:"announced,omitempty"`
	Withdrawn []string `json:"withdrawn,omitempty"`
}

// RouteLog turns successive reads of the router's next hops (each a full
// read of the addresses it routes) into changes: every address whose set
// differs from the previous read's, an address missing from a read having
// none. The first read is against nothing, so what is routed then is
// announced at its time.
type RouteLog struct {
	last    map[netip.Prefix][]netip.Addr
	Changes []RouteChange
}

// Read records the read that ended at at.
func (l *RouteLog) Read(at time.Time, hops map[netip.Prefix][]netip.Addr) {
	addrs := slices.Collect(maps.Keys(hops))
	for p := range l.last {
		if _, ok := hops[p]; !ok {
			addrs = append(addrs, p)
		}
	}
	slices.SortFunc(addrs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for _, p := range addrs {
		before, after := l.last[p], sortedAddrs(hops[p])
		if slices.Equal(before, after) {
			continue
		}
		c := RouteChange{When: at, Time: Timestamp(at), Address: prefixString(p), NextHops: addrStrings(after)}
		for _, a := range after {
			if !slices.Contains(before, a) {
				c.Announced = append(c.Announced, a.String())
			}
		}
		for _, a := range before {
			if !slices.Contains(after, a) {
				c.Withdrawn = append(c.Withdrawn, a.String())
			}
		}
		l.Changes = append(l.Changes, c)
	}
	l.last = map[netip.Prefix][]netip.Addr{}
	for p, h := range hops {
		if len(h) > 0 {
			l.last[p] = sortedAddrs(h)
		}
	}
}

// From are the changes with their offsets from start (the traffic's).
func (l *RouteLog) From(start time.Time) []RouteChange {
	out := slices.Clone(l.Changes)
	for i := range out {
		// Whole milliseconds: the traffic's start is known to those.
		out[i].At = float64(out[i].When.Sub(start).Milliseconds()) / 1000
	}
	return out
}

func sortedAddrs(in []netip.Addr) []netip.Addr {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

func addrStrings(in []netip.Addr) []string {
	out := make([]string, 0, len(in))
	for _, a := range in {
		out = append(out, a.String())
	}
	return out
}

// prefixString is a host route's address alone, any other prefix whole.
func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// maxRouteLanes bounds the route lanes of one card: a run with many
// Services (churn) would otherwise draw hundreds; the rest are counted in
// a last line.
const maxRouteLanes = 8

// routeLane is one address through one node over the run: the changes at
// which the node was announced (on) or withdrawn.
type routeLane struct {
	addr, hop string
	edges     []routeEdge
}

func (l routeLane) label() string { return l.addr + " via " + l.hop }

type routeEdge struct {
	at float64 // seconds from the traffic's start
	on bool
}

// routeLanes are the lanes of changes, by address (in the order they
// first appear) then node; more is how many lanes were left out
// (maxRouteLanes).
func routeLanes(changes []RouteChange) (lanes []routeLane, more int) {
	index := map[[2]string]int{}
	var addrs []string
	var all []routeLane
	edge := func(addr, hop string, at float64, on bool) {
		key := [2]string{addr, hop}
		i, ok := index[key]
		if !ok {
			i = len(all)
			index[key] = i
			all = append(all, routeLane{addr: addr, hop: hop})
			if !slices.Contains(addrs, addr) {
				addrs = append(addrs, addr)
			}
		}
		all[i].edges = append(all[i].edges, routeEdge{at: at, on: on})
	}
	for _, c := range changes {
		for _, h := range c.Announced {
			edge(c.Address, h, c.At, true)
		}
		for _, h := range c.Withdrawn {
			edge(c.Address, h, c.At, false)
		}
	}
	// Stable: within an address, nodes in the order they first appear.
	slices.SortStableFunc(all, func(a, b routeLane) int {
		return slices.Index(addrs, a.addr) - slices.Index(addrs, b.addr)
	})
	if len(all) > maxRouteLanes {
		return all[:maxRouteLanes], len(all) - maxRouteLanes
	}
	return all, 0
}

// routeRows are the rows routes draws, each an address's header (lane
// nil), a lane, or the count of lanes left out (more > 0, last).
type routeRow struct {
	header string
	lane   *routeLane
	more   int
}

func routeRowsOf(changes []RouteChange) []routeRow {
	lanes, more := routeLanes(changes)
	var rows []routeRow
	for i := range lanes {
		if i == 0 || lanes[i].addr != lanes[i-1].addr {
			rows = append(rows, routeRow{header: lanes[i].addr})
		}
		rows = append(rows, routeRow{lane: &lanes[i]})
	}
	if more > 0 {
		rows = append(rows, routeRow{more: more})
	}
	return rows
}

// routeLaneRows is how many rows routes draws.
func routeLaneRows(changes []RouteChange) int { return len(routeRowsOf(changes)) }

// Route lanes' colours: the span an address is routed through the node,
// an announcement's mark and a withdrawal's.
const (
	routeOnColour       = "#98df8a"
	routeAnnounceColour = "#2ca02c"
	routeWithdrawColour = "#d62728"
)

// routes draws, under the backend lanes (from p.routesTop), for each address a
// header and a lane per node: light green while the router routes the
// address through it, and each announcement (▲) and withdrawal (▼) inside
// the plot's span at its time (one before the traffic's start only sets
// the lane's state at 0).
func (p plot) routes(s *strings.Builder, changes []RouteChange) {
	end := float64(p.n)
	for i, row := range routeRowsOf(changes) {
		ly := p.routesTop + float64(i*(svgLaneH+svgLaneGap))
		switch {
		case row.more > 0:
			fmt.Fprintf(s, `<text x="%d" y="%.1f" font-size="8">and %d more routes (in the JSON)</text>`, svgLeft, ly+svgLaneH-1, row.more)
			continue
		case row.lane == nil:
			fmt.Fprintf(s, `<text x="%d" y="%.1f" text-anchor="end" font-size="8">routes of %s</text>`, svgLeft-4, ly+svgLaneH-1, html.EscapeString(row.header))
			continue
		}
		lane := row.lane
		fmt.Fprintf(s, `<text x="%d" y="%.1f" text-anchor="end" font-size="8">via %s</text>`, svgLeft-4, ly+svgLaneH-1, html.EscapeString(lane.hop))
		for j, e := range lane.edges {
			if !e.on {
				continue
			}
			until := end
			if j+1 < len(lane.edges) {
				until = lane.edges[j+1].at
			}
			from := max(e.at, 0)
			if until <= from {
				continue
			}
			x0, x1 := p.x(from), p.x(min(until, end))
			fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s routed from %.1fs</title></rect>`,
				x0, ly, max(x1-x0, 0.5), svgLaneH, routeOnColour, html.EscapeString(lane.label()), e.at)
		}
		for _, e := range lane.edges {
			if e.at < 0 || e.at > end {
				continue
			}
			// ▲ from the lane's top, ▼ from its bottom.
			x, kind, colour, d := p.x(e.at), "announce", routeAnnounceColour, ""
			if e.on {
				d = fmt.Sprintf("M%.1f %.1fl-4 8h8z", x, ly)
			} else {
				kind, colour, d = "withdraw", routeWithdrawColour, fmt.Sprintf("M%.1f %.1fl-4 -8h8z", x, ly+svgLaneH)
			}
			fmt.Fprintf(s, `<path class="route-%s" d="%s" fill="%s"><title>%.1fs %s %s</title></path>`,
				kind, d, colour, e.at, kind, html.EscapeString(lane.label()))
		}
	}
}
