package lab

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"strings"
)

// writeHTML writes a self-contained page: the table, then per scenario and
// mode an inline SVG timeline of requests and failures per second with the
// scenario's events as vertical markers.
func writeHTML(path string, results []Result, modes []Mode) error {
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
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
</style></head><body>
<h1>zerodrop lab</h1>
<p>Real kube-apiserver, kube-controller-manager, HAProxy and loopback pods under bounded traffic.
<code>baseline</code> is upstream-like behaviour switched on by configuration; <code>zerodrop</code> runs as shipped.
See docs/lab.md.</p>
<pre>`)
	var table bytes.Buffer
	writeTable(&table, results, modes)
	writeErrors(&table, results)
	b.WriteString(html.EscapeString(table.String()))
	b.WriteString("</pre>\n")
	b.WriteString(`<p class="legend"><span><i class="sw" style="background:#9bb7d4"></i>requests/s</span>` +
		`<span><i class="sw" style="background:#d62728"></i>failures/s (failed requests, late ones included, and broken long connections)</span>` +
		`<span><i class="sw" style="border-left:2px dashed #555;width:0"></i>events</span></p>` + "\n")
	var order []string
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.row()] {
			seen[r.row()] = true
			order = append(order, r.row())
		}
	}
	for _, s := range order {
		fmt.Fprintf(&b, "<h2>%s</h2>\n<div class=\"grid\">\n", html.EscapeString(s))
		for _, m := range modes {
			for _, r := range results {
				if r.row() == s && r.Mode == string(m) {
					writeCard(&b, r)
				}
			}
		}
		b.WriteString("</div>\n")
	}
	b.WriteString("</body></html>\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func writeCard(b *bytes.Buffer, r Result) {
	fmt.Fprintf(b, "<div class=\"card\"><h3>%s — %d requests, %d failed (%d late); %d long connections, %d closed (1001), %d broken; %d writes, %d conflicts; %.1f s</h3>\n",
		html.EscapeString(r.Mode), r.Requests, r.FailedRequests, r.RequestsLate, r.LongConns, r.LongConnsClosed, r.LongConnsBroken,
		r.ProviderWrites, r.ProviderConflicts, r.DurationSeconds)
	if r.err != nil {
		fmt.Fprintf(b, "<p>error: %s</p>", html.EscapeString(r.err.Error()))
	}
	if r.timeline != nil {
		b.WriteString(timelineSVG(r.timeline))
	}
	b.WriteString("</div>\n")
}

// timelineSVG draws one timeline: bars per second, markers as dashed lines
// with their labels staggered over four rows.
func timelineSVG(t *timeline) string {
	const (
		width, height = 640, 230
		left, right   = 40, 10
		top, bottom   = 70, 25
	)
	n := max(len(t.Seconds), 1)
	for _, m := range t.Markers {
		n = max(n, int(m.At.Seconds())+1)
	}
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	peak := 1
	for _, s := range t.Seconds {
		peak = max(peak, s.Requests, s.Failures)
	}
	x := func(sec float64) float64 { return left + sec/float64(n)*plotW }
	y := func(v int) float64 { return top + plotH - float64(v)/float64(peak)*plotH }
	bw := plotW / float64(n)
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="10">`, width, height, width, height)
	fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999"/>`, left, top+plotH, width-right, top+plotH)
	fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#999"/>`, left, top, left, top+plotH)
	fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%d/s</text>`, left-4, top+4, peak)
	fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end">0</text>`, left-4, top+plotH)
	step := max(5, (n/10+4)/5*5)
	for sec := 0; sec <= n; sec += step {
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`, x(float64(sec)), height-8, sec)
	}
	for i, sec := range t.Seconds {
		if sec.Requests > 0 {
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#9bb7d4"><title>%ds: %d requests</title></rect>`,
				x(float64(i))+0.5, y(sec.Requests), max(bw-1, 0.5), top+plotH-y(sec.Requests), i, sec.Requests)
		}
		if sec.Failures > 0 {
			h := max(top+plotH-y(sec.Failures), 3)
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d62728"><title>%ds: %d failures</title></rect>`,
				x(float64(i))+0.5, top+plotH-h, max(bw-1, 0.5), h, i, sec.Failures)
		}
	}
	for i, m := range t.Markers {
		mx := x(m.At.Seconds())
		row := i % 4
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="3,3"/>`, mx, 12+row*14, mx, top+plotH)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" fill="#333">%s<title>%.1fs %s</title></text>`,
			mx+2, 10+row*14, html.EscapeString(m.Label), m.At.Seconds(), html.EscapeString(m.Label))
	}
	s.WriteString("</svg>\n")
	return s.String()
}
