package report

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"slices"
	"strings"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// kindColours colour the failure kinds in the HTML report.
var kindColours = []struct{ kind, colour string }{
	{traffic.KindRefused, "#d62728"}, {traffic.KindReset, "#8c1c13"}, {traffic.KindTimeout, "#ff7f0e"}, {traffic.Kind5xx, "#9467bd"},
	{traffic.KindEOF, "#e377c2"}, {traffic.KindLate, "#bcbd22"}, {traffic.KindRetry, "#17becf"}, {traffic.KindLost, "#7f7f7f"},
	{traffic.KindNoClose, "#8c564b"}, {traffic.KindClose, "#1f3d7a"}, {traffic.KindError, "#000000"},
}

// stateColours colour the backend lanes.
var stateColours = []struct{ state, colour string }{
	{StateUp, "#2ca02c"}, {StateDown, "#d62728"}, {StateDrain, "#ffbf00"}, {StateMaint, "#7f7f7f"}, {StateRemoved, "#ffffff"},
}

func stateColour(state string) string {
	for _, s := range stateColours {
		if s.state == state {
			return s.colour
		}
	}
	return "#000000"
}

// writeHTML writes a self-contained page: the table, then per scenario and
// traffic policy one card per mode and backend, all on one time axis: the
// requests and failures per second (failures coloured by kind), the
// scenario's events as vertical markers, and under them each backend's
// HAProxy state over time.
func WriteHTML(path string, results []Result, modes []Mode) error {
	var b bytes.Buffer
	b.WriteString(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zerodrop lab</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
pre{background:#f6f6f6;padding:1em;overflow:auto}
h2{margin-top:2em;font-size:1.2em}
.grid{display:flex;flex-wrap:wrap;gap:1.5em}
.card{border:1px solid #ddd;padding:.5em 1em}
.card h3{margin:.3em 0;font-size:1em}
.legend span{display:inline-block;margin-right:1em}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle;border:1px solid #ccc}
</style></head><body>
<h1>zerodrop lab</h1>
<p>Real kube-apiserver, kube-controller-manager, kube-proxy, HAProxy and pods in network namespaces under bounded traffic.
<code>upstream</code> is the real service controller of k8s.io/cloud-provider with an Azure-like cloud and a typical workload;
<code>recipe</code> the same controller with the published preStop/minReadySeconds/PDB recipe;
<code>zerodrop</code> zerodrop's controller replicas and gates as the lab runs them. See docs/lab.md.</p>
<pre>`)
	var table bytes.Buffer
	WriteTable(&table, results, modes)
	WriteErrors(&table, results)
	b.WriteString(html.EscapeString(table.String()))
	b.WriteString("</pre>\n")
	writeSweep(&b, results)
	b.WriteString(`<p class="legend"><span><i class="sw" style="background:#9bb7d4"></i>requests/s</span>` +
		`<span><i class="sw" style="border-left:2px dashed #555;width:0"></i>events</span> failures/s by kind: `)
	for _, k := range kindColours {
		fmt.Fprintf(&b, `<span><i class="sw" style="background:%s"></i>%s</span>`, k.colour, k.kind)
	}
	b.WriteString(" backend state: ")
	for _, s := range stateColours {
		fmt.Fprintf(&b, `<span><i class="sw" style="background:%s"></i>%s</span>`, s.colour, s.state)
	}
	// Only runs behind FRR have route lanes (routes.go).
	if slices.ContainsFunc(results, func(r Result) bool { return len(r.RouterRoutes) > 0 }) {
		fmt.Fprintf(&b, ` router routes: <span><i class="sw" style="background:%s"></i>routed via</span><span style="color:%s">▲ announced</span> <span style="color:%s">▼ withdrawn</span>`,
			routeOnColour, routeAnnounceColour, routeWithdrawColour)
	}
	b.WriteString("</p>\n")
	var rows []string
	seconds := map[string]int{}
	for _, r := range results {
		if _, ok := seconds[r.row()]; !ok {
			rows = append(rows, r.row())
		}
		seconds[r.row()] = max(seconds[r.row()], r.Timeline.span())
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "<h2>%s</h2>\n<div class=\"grid\">\n", html.EscapeString(row))
		for _, m := range modes {
			for _, r := range results {
				if r.row() == row && r.Mode == string(m) {
					writeCard(&b, r, seconds[row])
				}
			}
		}
		b.WriteString("</div>\n")
	}
	b.WriteString("</body></html>\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func writeCard(b *bytes.Buffer, r Result, seconds int) {
	fmt.Fprintf(b, "<div class=\"card\"><h3>%s — %d requests, %d failed (%d late); %d long connections, %d closed (1001), %d broken; %d writes, %d conflicts; rollout %.1f s</h3>\n",
		html.EscapeString(r.column()), r.Requests, r.FailedRequests, r.RequestsLate, r.LongConns, r.LongConnsClosed, r.LongConnsBroken,
		r.ProviderWrites, r.ProviderConflicts, r.RolloutSeconds)
	if r.Err != nil {
		fmt.Fprintf(b, "<p>error: %s</p>", html.EscapeString(r.Err.Error()))
	}
	if r.Timeline != nil {
		b.WriteString(timelineSVG(r.Timeline, seconds))
	}
	b.WriteString("</div>\n")
}

// span is how many seconds the timeline covers.
func (t *Timeline) span() int {
	if t == nil {
		return 1
	}
	n := max(len(t.Seconds), 1)
	for _, m := range t.Markers {
		n = max(n, int(m.At.Seconds())+1)
	}
	for _, c := range t.Routes {
		n = max(n, int(c.At)+1)
	}
	return n
}

// timelineSVG draws one timeline over n seconds: bars per second (failures
// stacked by kind), markers as dashed lines with their labels staggered over
// four rows, a lane per backend with its HAProxy state, and behind FRR a
// lane per address and node the router routes it through.
func timelineSVG(t *Timeline, n int) string {
	p := newPlot(t, n)
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="10">`, svgWidth, p.height, svgWidth, p.height)
	p.axes(&s)
	p.bars(&s, t)
	p.markers(&s, t.Markers)
	p.lanes(&s, t.Lanes)
	p.routes(&s, t.Routes)
	s.WriteString("</svg>\n")
	return s.String()
}

// The timeline's geometry, in SVG units: the plot of requests per second
// between margins, the time axis under it, and the backend lanes below.
const (
	svgWidth, svgPlotHeight = 640, 135
	svgLeft, svgRight       = 110, 10
	svgTop, svgAxis         = 70, 25
	svgLaneH, svgLaneGap    = 9, 3
)

// plot is one timeline's scale: n seconds across, peak requests per second
// up (the cards of one row of the report share n).
type plot struct {
	n, peak      int
	plotW, plotH float64
	lanesTop     float64
	routesTop    float64 // the router's routes, under the backend lanes
	height       int
	bw           float64 // a second's bar
}

func newPlot(t *Timeline, n int) plot {
	n = max(n, t.span())
	p := plot{n: n, peak: 1, plotW: float64(svgWidth - svgLeft - svgRight), plotH: float64(svgPlotHeight)}
	p.lanesTop = svgTop + p.plotH + svgAxis
	p.routesTop = p.lanesTop + float64(len(t.Lanes)*(svgLaneH+svgLaneGap))
	p.height = int(p.routesTop) + routeLaneRows(t.Routes)*(svgLaneH+svgLaneGap) + 5
	for _, s := range t.Seconds {
		p.peak = max(p.peak, s.Requests, s.Failures)
	}
	p.bw = p.plotW / float64(n)
	return p
}

func (p plot) x(sec float64) float64 { return svgLeft + sec/float64(p.n)*p.plotW }
func (p plot) y(v int) float64       { return svgTop + p.plotH - float64(v)/float64(p.peak)*p.plotH }

// axes draws both axes, the peak and zero, and a time label every 5 s or
// more (about ten labels at most).
func (p plot) axes(s *strings.Builder) {
	top, plotH := float64(svgTop), p.plotH
	fmt.Fprintf(s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999"/>`, svgLeft, top+plotH, svgWidth-svgRight, top+plotH)
	fmt.Fprintf(s, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#999"/>`, svgLeft, svgTop, svgLeft, top+plotH)
	fmt.Fprintf(s, `<text x="%d" y="%d" text-anchor="end">%d/s</text>`, svgLeft-4, svgTop+4, p.peak)
	fmt.Fprintf(s, `<text x="%d" y="%.1f" text-anchor="end">0</text>`, svgLeft-4, top+plotH)
	step := max(5, (p.n/10+4)/5*5)
	for sec := 0; sec <= p.n; sec += step {
		fmt.Fprintf(s, `<text x="%.1f" y="%.1f" text-anchor="middle">%ds</text>`, p.x(float64(sec)), top+plotH+15, sec)
	}
}

// bars draws each second's requests, and its failures stacked by kind.
func (p plot) bars(s *strings.Builder, t *Timeline) {
	// Failures per second and kind, from the failure list (which keeps the
	// first maxEvents; the bars' totals come from the buckets).
	byKind := map[int]map[string]int{}
	for _, f := range t.Failures {
		sec := int(f.At.Seconds())
		if byKind[sec] == nil {
			byKind[sec] = map[string]int{}
		}
		byKind[sec][f.Kind]++
	}
	bottom, bw := svgTop+p.plotH, max(p.bw-1, 0.5)
	for i, sec := range t.Seconds {
		if sec.Requests > 0 {
			fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#9bb7d4"><title>%ds: %d requests</title></rect>`,
				p.x(float64(i))+0.5, p.y(sec.Requests), bw, bottom-p.y(sec.Requests), i, sec.Requests)
		}
		if sec.Failures == 0 {
			continue
		}
		// Stack the kinds; what the list did not keep is drawn in black.
		base, counted := bottom, 0
		for _, k := range kindColours {
			c := byKind[i][k.kind]
			if c == 0 {
				continue
			}
			counted += c
			h := max(float64(c)/float64(p.peak)*p.plotH, 3)
			base -= h
			fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%ds: %d %s</title></rect>`,
				p.x(float64(i))+0.5, base, bw, h, k.colour, i, c, k.kind)
		}
		if rest := sec.Failures - counted; rest > 0 {
			h := max(float64(rest)/float64(p.peak)*p.plotH, 3)
			fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#000"><title>%ds: %d failures</title></rect>`,
				p.x(float64(i))+0.5, base-h, bw, h, i, rest)
		}
	}
}

// markers draws each marker as a dashed line, its label on one of four
// rows in turn so that close markers stay readable.
func (p plot) markers(s *strings.Builder, ms []Marker) {
	for i, m := range ms {
		mx := p.x(m.At.Seconds())
		row := i % 4
		fmt.Fprintf(s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="3,3"/>`, mx, 12+row*14, mx, svgTop+p.plotH)
		fmt.Fprintf(s, `<text x="%.1f" y="%d" fill="#333">%s<title>%.1fs %s</title></text>`,
			mx+2, 10+row*14, html.EscapeString(m.Label), m.At.Seconds(), html.EscapeString(m.Label))
	}
}

// lanes draws a lane per backend: each state from its change to the next.
func (p plot) lanes(s *strings.Builder, lanes []BackendLane) {
	for i, lane := range lanes {
		ly := p.lanesTop + float64(i*(svgLaneH+svgLaneGap))
		fmt.Fprintf(s, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, svgLeft-4, ly+svgLaneH-1, html.EscapeString(lane.Backend))
		for j, sp := range lane.Spans {
			end := float64(p.n)
			if j+1 < len(lane.Spans) {
				end = lane.Spans[j+1].At.Seconds()
			}
			x0, x1 := p.x(sp.At.Seconds()), p.x(end)
			fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" stroke="#ccc" stroke-width="0.3"><title>%s %s from %.1fs</title></rect>`,
				x0, ly, max(x1-x0, 0.5), svgLaneH, stateColour(sp.State), html.EscapeString(lane.Backend), sp.State, sp.At.Seconds())
		}
	}
}
