package lab

import (
	"fmt"
	"io"
	"text/tabwriter"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azurewrites"
)

// writeAzureTable prints one row per scenario and mode of the Azure
// counting-writes world (package worlds/azurewrites).
func writeAzureTable(w io.Writer, results []report.Result) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tchanges\twrites\tLB PUTs\tpool PUTs\tchanged something\t412s\tconflicts retried\tsurfaced as Events\tfaults injected\tWarning Events\tconverge s\t")
	for _, r := range results {
		a := r.Azure
		if a == nil {
			continue
		}
		changes := fmt.Sprint(a.Changes)
		switch r.Scenario {
		case "restart", azurewrites.ScenarioRestartIdle:
			changes = fmt.Sprintf("%d restarts", a.Restarts)
		case report.ScenarioKillMidPlan:
			changes = fmt.Sprintf("%d kills, %d changes", a.Restarts, a.Changes)
		}
		status := ""
		if r.Err != nil {
			status = "  (failed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\n", r.Scenario, r.Mode, changes,
			r.ProviderWrites, a.LBPuts, a.PoolPuts, a.WritesChanged, a.PreconditionFailed, a.ConflictsRetried, a.ConflictsSurfaced, a.Faults, a.WarningEvents,
			a.ConvergeSeconds, status)
	}
	tw.Flush()
	for _, r := range results {
		if len(r.WritesPerRestart) > 0 {
			per := "kill"
			if r.Scenario != report.ScenarioKillMidPlan {
				per = "restart"
			}
			fmt.Fprintf(w, "%s %s: writes per %s %v\n", r.Scenario, r.Mode, per, r.WritesPerRestart)
		}
		if a := r.Azure; a != nil {
			for _, wf := range a.Writers {
				fmt.Fprintf(w, "%s %s: %s: %d writes, %d 412s, %d 409s, %d superseded, %d Warning Events, removed of the other writer's: %v\n",
					r.Scenario, r.Mode, wf.Writer, wf.Writes, wf.PreconditionFailed, wf.Conflicts, wf.Superseded, wf.WarningEvents, wf.RemovedOthers)
			}
		}
		if a := r.Azure; a != nil && r.Scenario == azurewrites.ScenarioChurn {
			fmt.Fprintf(w, "%s %s: %d 409s, %d superseded operations, %d error log lines; after the churn %d Local Services' pools stale, %d Services not on the load balancer they ask for\n",
				r.Scenario, r.Mode, a.Conflicts, a.Superseded, a.ErrorLogLines, a.StaleLocalPools, a.Misplaced)
		}
		if a := r.Azure; a != nil && len(a.Stops) > 0 {
			conf := ""
			if a.CCMLoadBalancers != "" {
				conf += ", " + a.CCMLoadBalancers + " load balancer layout"
			}
			if a.IdleChange != "" {
				conf += ", " + a.IdleChange + " during each outage"
			}
			fmt.Fprintf(w, "%s %s%s: stops %v; writes that changed something %v, backend addresses removed %v, probe or rule changes %v\n",
				r.Scenario, r.Mode, conf, a.Stops, a.ChangedPerRestart, a.RemovedBackendsPerRestart, a.ProbeRuleChangesPerRestart)
		}
		if a := r.Azure; a != nil && len(a.WritesLanded) > 0 {
			fmt.Fprintf(w, "%s %s: writes landed per kill %v, called for by the diff at takeover %v\n",
				r.Scenario, r.Mode, a.WritesLanded, a.WritesCalledFor)
		}
	}
}
