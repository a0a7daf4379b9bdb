package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteVerdict prints the lab's end for someone who has not read the
// table: per scenario (and traffic policy) and mode, the requests that
// failed, the WebSockets broken, the writes that landed on the load
// balancer and the time from the disruption to steady; then what was asked
// for and not run, with why (notRun), and where the HTML report is
// (htmlPath, "" for none).
func WriteVerdict(w io.Writer, results []Result, notRun []string, htmlPath string) {
	fmt.Fprintln(w, "\nVerdict, per scenario and mode: requests failed and WebSockets broken (each one a user's error), writes to the load balancer, time from the disruption to steady:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// One block per row, in the order the rows first ran (a scenario's
	// node-backed runs of a policy come after its IP-backed runs of the
	// other).
	var rows []string
	byRow := map[string][]Result{}
	for _, r := range results {
		if byRow[r.row()] == nil {
			rows = append(rows, r.row())
		}
		byRow[r.row()] = append(byRow[r.row()], r)
	}
	for _, row := range rows {
		// A line without tabs: each scenario's block is aligned on its own.
		fmt.Fprintf(tw, "  %s\n", verdictTitle(byRow[row][0]))
		for _, r := range byRow[row] {
			writeVerdictLine(tw, r)
		}
	}
	_ = tw.Flush()
	if len(notRun) > 0 {
		fmt.Fprintln(w, "Not run:")
		for _, n := range notRun {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if htmlPath != "" {
		fmt.Fprintf(w, "HTML report (timelines of every run): %s\n", htmlPath)
	}
}

// writeVerdictLine is one run's line of the verdict.
func writeVerdictLine(tw io.Writer, r Result) {
	if r.Err != nil {
		first, _, _ := strings.Cut(r.Err.Error(), "\n")
		fmt.Fprintf(tw, "    %s\tdid not complete: %s\n", r.column(), first)
		return
	}
	failed := fmt.Sprintf("%s of %s requests failed", Thousands(r.FailedRequests), Thousands(r.Requests))
	if r.RequestsLateStall > 0 {
		// Late because the lab's own client woke too late, before any
		// connection was tried: counted, but no load balancer's doing.
		failed += fmt.Sprintf(" (%s of them the lab client's stall)", Thousands(r.RequestsLateStall))
	}
	fmt.Fprintf(tw, "    %s\t%s\t%s of %s WebSockets broken\t%s writes\t%.1f s\n",
		r.column(), failed, Thousands(r.LongConnsBroken), Thousands(r.LongConns), Thousands(r.ProviderWrites), r.RolloutSeconds)
}

// verdictTitle names a scenario row in words: "rollout-local,
// externalTrafficPolicy Local".
func verdictTitle(r Result) string {
	switch r.ExternalTrafficPolicy {
	case "local":
		return r.Scenario + ", externalTrafficPolicy Local"
	case "cluster":
		return r.Scenario + ", externalTrafficPolicy Cluster"
	}
	return r.Scenario
}

// Thousands formats n with commas between groups of three digits.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
