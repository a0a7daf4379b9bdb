package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// Result is one scenario in one mode, as the JSON report holds it.
type Result struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	// Backend is what the load balancer sends to: "ip" (pod IPs) or
	// "node" (node IP:nodePort, through kube-proxy); ExternalTrafficPolicy
	// the Service's externalTrafficPolicy, "cluster" or "local".
	Backend               string `json:"backend,omitempty"`
	ExternalTrafficPolicy string `json:"external_traffic_policy,omitempty"`
	Requests              int64  `json:"requests"`
	FailedRequests        int64  `json:"failed_requests"` // late ones included
	RequestsLate          int64  `json:"requests_late"`
	// RequestsLateStall is the part of RequestsLate whose worker was
	// waiting for the slot in time and woke too late: a stall of the
	// client's own process or machine, not a backlog.
	RequestsLateStall int64   `json:"requests_late_client_stall"`
	LongConns         int64   `json:"long_conns"`
	LongConnsClosed   int64   `json:"long_conns_closed"`
	LongConnsBroken   int64   `json:"long_conns_broken"`
	ReconnectP50Ms    float64 `json:"long_reconnect_p50_ms"`
	ReconnectMaxMs    float64 `json:"long_reconnect_max_ms"`
	// ProviderWrites are the HAProxy runtime API writes (commands and
	// reloads) counted at its sockets; ControllerWrites what the
	// controllers' own zerodrop_provider_writes_total metrics say.
	ProviderWrites    int64 `json:"provider_writes"`
	ControllerWrites  int64 `json:"controller_reported_writes"`
	ProviderConflicts int64 `json:"provider_conflicts"`
	// HookFailures counts the run's preStop hooks that failed: could not
	// run, an httpGet that failed or answered other than 2xx, or a drain
	// call that answered "timeout" (the pod stopped undrained).
	HookFailures int64 `json:"hook_failures"`
	// DrainRelayRetries counts the drain relay's attempts that failed and
	// were made again (a drain call cut, refused or answered busy, most
	// often by a controller replica's end): each one a preStop hook that
	// the kubelet alone would have failed.
	DrainRelayRetries int64 `json:"drain_relay_retries"`
	// DrainDrained and DrainDeadline count the zerodrop controllers' drain
	// calls answered drained and at their deadline
	// (zerodrop_drain_outcome_total; 0 in modes without the gate).
	DrainDrained  int64 `json:"drain_drained"`
	DrainDeadline int64 `json:"drain_deadline"`
	// WritesPerRestart are restart-idle's and kill-mid-plan's writes, one
	// entry per restart: those counted at HAProxy's sockets from that
	// restart to the next.
	WritesPerRestart []int64 `json:"writes_per_restart,omitempty"`
	// FailedPerRestart and BrokenPerRestart are the requests failed and
	// long connections broken from each of restart-idle's (and
	// maintenance's) restarts to the next (the last: to the act's end).
	FailedPerRestart []int64 `json:"failed_requests_per_restart,omitempty"`
	BrokenPerRestart []int64 `json:"broken_long_conns_per_restart,omitempty"`
	// Maintenance holds the maintenance scenario's own figures.
	Maintenance *MaintenanceFigures `json:"maintenance,omitempty"`
	// DuplicateBackendSamples counts the state samples (every 250 ms) in
	// which HAProxy had one address and port twice among the Service's
	// first port's backends.
	DuplicateBackendSamples int64 `json:"duplicate_backend_samples"`
	// DataPlaneReplicas is the HAProxy data plane's replicas
	// (--data-plane-replicas; 0: one HAProxy written by the leader).
	DataPlaneReplicas int `json:"data_plane_replicas,omitempty"`
	// DataPlaneSessions are the connections each replica running at the end
	// accepted (its HAProxy's frontends' stot; -1: not read): how the
	// client's route spread the traffic.
	DataPlaneSessions []int64 `json:"data_plane_sessions,omitempty"`
	// ReplicaDisruption holds lb-replica-restart's figures by phase.
	ReplicaDisruption *ReplicaFigures `json:"replica_disruption,omitempty"`
	// DataPlaneUpdate holds lb-update's figures (update.go).
	DataPlaneUpdate *UpdateFigures `json:"data_plane_update,omitempty"`
	// Chaos holds the chaos scenarios' own figures (chaos.go).
	Chaos *ChaosFigures `json:"chaos,omitempty"`
	// RolloutSeconds is the disruption: from its start to the workload
	// steady again (0 when the run did not get there).
	RolloutSeconds  float64 `json:"rollout_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Frontend is the address the clients sent to; TrafficStart and
	// TrafficEnd (RFC 3339, milliseconds) bound the traffic, so a client
	// outside the lab can count the same window.
	Frontend     string `json:"frontend,omitempty"`
	ClientNetns  string `json:"client_netns,omitempty"`
	TrafficStart string `json:"traffic_start,omitempty"`
	TrafficEnd   string `json:"traffic_end,omitempty"`
	// Azure holds the --provider azure-emulator figures (azure.go).
	Azure *AzureFigures `json:"azure,omitempty"`
	// AzureClock is the clocks of a traffic run on emulated Azure.
	AzureClock *AzureClock `json:"azure_clock,omitempty"`
	// AWS holds the --provider aws-emulator figures (aws.go).
	AWS *AWSFigures `json:"aws,omitempty"`
	// Outside holds the outside client's counts beside the lab's
	// (--outside-client-rate; outside.go).
	Outside *OutsideFigures `json:"outside_client,omitempty"`
	// RouterRoutes are, behind FRR (--router frr-ecmp or frr-resilient),
	// the changes of the router's next hops for the run's addresses from
	// its data plane's start to the act's end (routes.go).
	RouterRoutes []RouteChange `json:"router_routes,omitempty"`

	// Error is Err's text in the JSON (WriteJSON), so that a run that did
	// not complete is there with its reason, not missing.
	Error string `json:"error,omitempty"`

	// Timeline is what the HTML report draws and Err why the run failed;
	// neither is in the JSON.
	Timeline *Timeline `json:"-"`
	Err      error     `json:"-"`
}

// row names the result's table row: the scenario and, when set, its traffic
// policy (the modes and backends are the columns).
func (r Result) row() string {
	row := r.Scenario
	if r.ExternalTrafficPolicy != "" {
		row += " " + r.ExternalTrafficPolicy
	}
	if c := r.AzureClock; c != nil {
		row += " " + c.String()
	}
	return row
}

// column names the result's table column: its mode and, when set, its
// backend ("zerodrop/ip"; upstream and recipe are always node-backed).
func (r Result) column() string {
	if r.Backend == "" || Mode(r.Mode).NodeBacked() {
		return r.Mode
	}
	return r.Mode + "/" + r.Backend
}

// Report is the JSON document: {"scenarios":[…]}.
type Report struct {
	Scenarios []Result `json:"scenarios"`
}

// timeline is what the HTML report draws.
type Timeline struct {
	Seconds    []traffic.Bucket
	Failures   []traffic.Failure
	Markers    []Marker
	LongClosed int64
	Exchanges  int64
	// Lanes are the HAProxy states of the Service's backends over the run.
	Lanes []BackendLane
	// Routes are the router's changes of next hops (RouterRoutes).
	Routes []RouteChange
}

func WriteJSON(path string, rep Report) error {
	scenarios := make([]Result, 0, len(rep.Scenarios))
	for _, r := range rep.Scenarios {
		if r.Err != nil {
			r.Error = r.Err.Error()
		}
		scenarios = append(scenarios, r)
	}
	rep.Scenarios = scenarios
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Finish is the end every lab command shares: the lab's error (err) on
// stderr, the JSON report at jsonPath (none when empty), and the exit
// status: 1 when the lab, a run or the report failed, 0 otherwise.
func Finish(stderr io.Writer, results []Result, err error, jsonPath string) int {
	code := 0
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
		code = 1
	}
	if slices.ContainsFunc(results, func(r Result) bool { return r.Err != nil }) {
		code = 1
	}
	if jsonPath != "" {
		if err := WriteJSON(jsonPath, Report{Scenarios: results}); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			code = 1
		}
	}
	return code
}

// writeTable prints the results side by side: one row per scenario and
// traffic policy, each figure as upstream | recipe | zerodrop/ip |
// zerodrop/node (the columns that ran, in the modes' order), "-" where a
// column did not run that row.
func WriteTable(w io.Writer, results []Result, modes []Mode) {
	type key struct{ row, col string }
	by := map[key]Result{}
	var rows, columns []string
	for _, m := range modes {
		for _, r := range results {
			if r.Mode == string(m) && !slices.Contains(columns, r.column()) {
				columns = append(columns, r.column())
			}
		}
	}
	for _, r := range results {
		if !slices.Contains(rows, r.row()) {
			rows = append(rows, r.row())
		}
		by[key{r.row(), r.column()}] = r
	}
	cols := []struct {
		title string
		value func(Result) string
	}{
		{"requests", func(r Result) string { return fmt.Sprint(r.Requests) }},
		{"failed", func(r Result) string { return fmt.Sprint(r.FailedRequests) }},
		{"late", func(r Result) string { return fmt.Sprint(r.RequestsLate) }},
		{"long conns", func(r Result) string { return fmt.Sprint(r.LongConns) }},
		{"closed", func(r Result) string { return fmt.Sprint(r.LongConnsClosed) }},
		{"broken", func(r Result) string { return fmt.Sprint(r.LongConnsBroken) }},
		{"reconnect max ms", func(r Result) string { return fmt.Sprintf("%.0f", r.ReconnectMaxMs) }},
		{"writes", func(r Result) string { return fmt.Sprint(r.ProviderWrites) }},
		{"conflicts", func(r Result) string { return fmt.Sprint(r.ProviderConflicts) }},
		{"hook failures", func(r Result) string { return fmt.Sprint(r.HookFailures) }},
		{"drained / at deadline", func(r Result) string { return fmt.Sprintf("%d / %d", r.DrainDrained, r.DrainDeadline) }},
		{"rollout s", func(r Result) string { return fmt.Sprintf("%.1f", r.RolloutSeconds) }},
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"scenario"}
	for _, c := range cols {
		header = append(header, c.title)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	fmt.Fprintln(tw, "\t"+strings.Repeat(strings.Join(columns, " | ")+"\t", len(cols)))
	for _, s := range rows {
		row := []string{s}
		for _, c := range cols {
			var vals []string
			for _, col := range columns {
				r, ok := by[key{s, col}]
				switch {
				case !ok:
					vals = append(vals, "-")
				case r.Err != nil:
					vals = append(vals, "error")
				default:
					vals = append(vals, c.value(r))
				}
			}
			row = append(row, strings.Join(vals, " | "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	_ = tw.Flush()
	writeNotes(w, results)
}

// writeNotes prints, under the table, the figures of a run that have no
// column: writes per restart, the chaos scenarios' own and whether the
// gates' bound on AWS held.
func writeNotes(w io.Writer, results []Result) {
	for _, r := range results {
		if len(r.WritesPerRestart) > 0 {
			fmt.Fprintf(w, "%s %s: writes per restart %v; WebSockets ended %d (%d closed, %d broken)\n",
				r.row(), r.column(), r.WritesPerRestart, r.LongConnsClosed+r.LongConnsBroken, r.LongConnsClosed, r.LongConnsBroken)
		}
		if len(r.FailedPerRestart) > 0 {
			fmt.Fprintf(w, "%s %s: failed requests per restart %v, broken WebSockets per restart %v\n",
				r.row(), r.column(), r.FailedPerRestart, r.BrokenPerRestart)
		}
		if m := r.Maintenance; m != nil {
			marked := "tainted"
			if m.Signal == SignalExcludeLabel {
				marked = "labelled to be excluded from load balancers"
			}
			fmt.Fprintf(w, "%s %s: %s %s, then %.0fs with nothing else changed: %d writes, %d failed requests, %d broken WebSockets\n",
				r.row(), r.column(), m.Node, marked, m.WaitSeconds, m.WritesDuringWait, m.FailedDuringWait, m.BrokenDuringWait)
		}
		if c := r.Chaos; c != nil && c.Kills > 0 {
			fmt.Fprintf(w, "%s %s: %d kills in %d rolling updates, at %v; backend doubled in %d samples\n",
				r.row(), r.column(), c.Kills, c.Rollouts, c.KillVerbs, r.DuplicateBackendSamples)
		}
		if c := r.Chaos; c != nil && c.OutageSeconds > 0 {
			fmt.Fprintf(w, "%s %s: API server stopped %.1fs; writes during %d, after %d; backends changed in %d samples; leader process ended: %v\n",
				r.row(), r.column(), c.OutageSeconds, c.WritesDuringOutage, c.WritesAfterRecovery, c.PoolChanges, c.LeaderExited)
		}
		writeAWSBound(w, r)
	}
}

// writeErrors lists the scenarios that did not complete.
func WriteErrors(w io.Writer, results []Result) {
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "%s %s: %v\n", r.row(), r.column(), r.Err)
		}
	}
}

// kinds summarises the failures of a run by source and kind:
// " (request/eof 3, long/timeout 1)".
func Kinds(t *Timeline) string {
	if t == nil || len(t.Failures) == 0 {
		return ""
	}
	count := map[string]int{}
	for _, f := range t.Failures {
		count[f.Source+"/"+f.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// timestamp is t in RFC 3339 with milliseconds, UTC.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func Milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// AzureClock is what a traffic run on emulated Azure took its time from
// (--arm-latency, --lb-propagation, --health-lag) and the grace period the
// run's pods had.
type AzureClock struct {
	ARMLatencySeconds    float64 `json:"arm_latency_seconds"`
	LBPropagationSeconds float64 `json:"lb_propagation_seconds"`
	HealthLagSeconds     float64 `json:"health_lag_seconds"`
	// GraceSeconds is the workload pods' terminationGracePeriodSeconds.
	GraceSeconds float64 `json:"grace_seconds"`
	// Promise is what the mode's published bound says at these clocks
	// (PromiseAt); none for upstream and recipe.
	Promise *Promise `json:"promise,omitempty"`
}

// String names the point of a sweep: "arm 10s lb+0s lag 0s".
func (c AzureClock) String() string {
	d := func(s float64) string { return time.Duration(s * float64(time.Second)).String() }
	return "arm " + d(c.ARMLatencySeconds) + " lb+" + d(c.LBPropagationSeconds) + " lag " + d(c.HealthLagSeconds)
}
