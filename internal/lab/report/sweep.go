package report

import (
	"bytes"
	"fmt"
	"html"
	"slices"
	"strings"
)

// The sweep of the traffic lab on emulated Azure: per scenario and traffic
// policy, failed requests and broken WebSockets against the sweep's points
// (ARM latency, propagation, health lag), one line per mode, and the
// rollout time and grace period of each run beside them.

// modeColours colour the modes' lines.
var modeColours = map[string]string{string(ModeUpstream): "#d62728", string(ModeRecipe): "#ff7f0e", string(ModeZerodrop): "#2ca02c",
	string(ModeGates): "#1f77b4"}

// sweepGroup is one scenario and policy's runs across the sweep.
type sweepGroup struct {
	name   string
	points []string // in order of first appearance
	runs   map[string]map[string]Result
}

// sweepGroups groups the results with a clock by scenario and policy.
func sweepGroups(results []Result) []*sweepGroup {
	var groups []*sweepGroup
	by := map[string]*sweepGroup{}
	for _, r := range results {
		if r.AzureClock == nil {
			continue
		}
		name := r.Scenario
		if r.ExternalTrafficPolicy != "" {
			name += " " + r.ExternalTrafficPolicy
		}
		g := by[name]
		if g == nil {
			g = &sweepGroup{name: name, runs: map[string]map[string]Result{}}
			by[name] = g
			groups = append(groups, g)
		}
		p := r.AzureClock.String()
		if !slices.Contains(g.points, p) {
			g.points = append(g.points, p)
		}
		if g.runs[r.column()] == nil {
			g.runs[r.column()] = map[string]Result{}
		}
		g.runs[r.column()][p] = r
	}
	return groups
}

// writeSweep writes the sweep's charts and tables; nothing without a sweep
// of two points or more.
func writeSweep(b *bytes.Buffer, results []Result) {
	for _, g := range sweepGroups(results) {
		if len(g.points) < 2 {
			continue
		}
		var cols []string
		for _, r := range results {
			if r.AzureClock != nil && !slices.Contains(cols, r.column()) {
				if _, ok := g.runs[r.column()]; ok {
					cols = append(cols, r.column())
				}
			}
		}
		fmt.Fprintf(b, "<h2>sweep: %s</h2>\n<div class=\"grid\">\n", html.EscapeString(g.name))
		for _, chart := range []struct {
			title string
			value func(Result) float64
		}{
			{"failed requests (%)", func(r Result) float64 {
				if r.Requests == 0 {
					return 0
				}
				return 100 * float64(r.FailedRequests) / float64(r.Requests)
			}},
			{"broken WebSockets", func(r Result) float64 { return float64(r.LongConnsBroken) }},
		} {
			b.WriteString("<div class=\"card\"><h3>" + chart.title + "</h3>\n")
			b.WriteString(sweepSVG(g, cols, chart.value))
			b.WriteString("</div>\n")
		}
		b.WriteString("</div>\n<table border=\"1\" cellpadding=\"4\" style=\"border-collapse:collapse;margin-top:1em\"><tr><th>point</th>")
		for _, c := range cols {
			fmt.Fprintf(b, "<th>%s failed / requests</th><th>%s broken</th><th>%s rollout s</th><th>%s grace s</th><th>%s bound</th>", c, c, c, c, c)
		}
		b.WriteString("</tr>\n")
		for _, p := range g.points {
			fmt.Fprintf(b, "<tr><td>%s</td>", html.EscapeString(p))
			for _, c := range cols {
				r, ok := g.runs[c][p]
				switch {
				case !ok:
					b.WriteString("<td>not run</td><td></td><td></td><td></td><td></td>")
				case r.Err != nil:
					fmt.Fprintf(b, "<td colspan=\"4\">error: %s</td><td>%s</td>", html.EscapeString(r.Err.Error()), promiseCell(r.AzureClock.Promise))
				default:
					fmt.Fprintf(b, "<td>%d / %d</td><td>%d</td><td>%.1f</td><td>%.0f</td><td>%s</td>", r.FailedRequests, r.Requests, r.LongConnsBroken,
						r.RolloutSeconds, r.AzureClock.GraceSeconds, promiseCell(r.AzureClock.Promise))
				}
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</table>\n")
	}
}

// sweepSVG draws value against the group's points, one polyline per
// column (mode and backend); a run that failed or did not run leaves a gap.
func sweepSVG(g *sweepGroup, cols []string, value func(Result) float64) string {
	const w, h, left, bottom, top = 560, 240, 50, 90, 10
	ymax := 1.0
	for _, c := range cols {
		for _, r := range g.runs[c] {
			if r.Err == nil {
				ymax = max(ymax, value(r))
			}
		}
	}
	x := func(i int) float64 {
		if len(g.points) == 1 {
			return left
		}
		return left + float64(i)*float64(w-left-10)/float64(len(g.points)-1)
	}
	y := func(v float64) float64 { return top + (1-v/ymax)*float64(h-top-bottom) }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg width="%d" height="%d" font-size="10">`, w, h)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, h-bottom, w-10, h-bottom)
	fmt.Fprintf(&b, `<text x="2" y="%d">%.1f</text><text x="2" y="%d">0</text>`, top+8, ymax, h-bottom)
	for i, p := range g.points {
		fmt.Fprintf(&b, `<text transform="translate(%.0f,%d) rotate(40)">%s</text>`, x(i), h-bottom+12, html.EscapeString(p))
	}
	for k, c := range cols {
		mode, _, _ := strings.Cut(c, "/") // "zerodrop/ip" → "zerodrop"
		colour := modeColours[mode]
		if colour == "" {
			colour = "#000"
		}
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, colour, strings.Join(pts, " "))
			}
			pts = nil
		}
		for i, p := range g.points {
			r, ok := g.runs[c][p]
			if !ok || r.Err != nil {
				flush()
				continue
			}
			px, py := x(i), y(value(r))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s: %.2f</title></circle>`, px, py, colour,
				html.EscapeString(c), html.EscapeString(p), value(r))
		}
		flush()
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`, left+10+k*110, top+8, colour, html.EscapeString(c))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// promiseCell says what the mode's published bound promises at the point.
func promiseCell(p *Promise) string {
	switch {
	case p == nil:
		return "none published"
	case p.Holds:
		return "must lose nothing: " + html.EscapeString(p.Why)
	}
	return "not promised: " + html.EscapeString(p.Why)
}
