package azure

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The world's own figures of a run's act (world.Measurer), from the
// emulator's record: the writes by kind and what they changed, 412s, 409s
// and superseded operations, the faults injected (Options.FaultRate),
// the Warning Events on the run's Services and the CCM's error log lines;
// per stop of the writer (world.RestartObserver), the writes that changed
// something, the backend addresses they removed and their probe or rule
// changes.

var (
	_ world.Measurer        = (*run)(nil)
	_ world.RestartObserver = (*run)(nil)
)

// actRecord is where the act's stretch of the record starts, and its
// stops.
type actRecord struct {
	mark     int
	counters azurearm.Counters
	logs     map[string]int64
	stops    []stopAt
	changes  int // the churn's changes of the other Services (churn.go)
}

// stopAt is one stop of the writer: its signal's name and where the
// record stood when it was sent.
type stopAt struct {
	name string
	mark int
}

// ActStart waits for the run's other Services (Options.Services) to have
// their addresses and the writers to go quiet, then starts the act's
// stretch of the record and the faults.
func (a *run) ActStart(ctx context.Context) error {
	if err := a.waitOthers(ctx); err != nil {
		return err
	}
	settleRecord(ctx, a.emu)
	_, a.act.mark = a.emu.Calls(0)
	a.act.counters = a.emu.Counters()
	a.act.logs = logSizes(a.ccmLogs())
	if r := a.w.opts.FaultRate; r > 0 {
		a.emu.SetFaults(azurearm.Faults{Rate: r, Cooldown: 3, SlowDelay: 50 * time.Millisecond})
	}
	return nil
}

// Stopping starts the stretch of the record of stop i.
func (a *run) Stopping(i int, stop string) {
	_, mark := a.emu.Calls(0)
	a.act.stops = append(a.act.stops, stopAt{name: stop, mark: mark})
}

// ActEnd stops the faults, waits for the writers to go quiet and adds the
// act's figures to res.
func (a *run) ActEnd(ctx context.Context, res *report.Result) error {
	a.emu.SetFaults(azurearm.Faults{})
	settleRecord(ctx, a.emu)
	calls, end := a.emu.Calls(a.act.mark)
	f := figuresOf(calls)
	d := a.emu.Counters().Sub(a.act.counters)
	fig := &report.AzureFigures{LBPuts: f.lbPuts, PoolPuts: f.poolPuts, Gets: f.gets, PreconditionFailed: f.preconditionFailed,
		WritesChanged: f.changed, Conflicts: f.conflicts, Superseded: f.superseded,
		Faults: d.InjectedConflicts + d.Throttled + d.ServerErrors + d.Slow, ConflictsRetried: res.ProviderConflicts,
		Changes: a.act.changes, Restarts: len(a.act.stops)}
	if a.w.opts.IdleChange != IdleChangeNone && a.w.opts.IdleChange != "" && len(a.act.stops) > 0 {
		fig.IdleChange = a.w.opts.IdleChange
	}
	if a.env.Mode.NodeBacked() {
		fig.CCMLoadBalancers = a.w.opts.CCMLoadBalancers
		fig.CCMRelease, fig.ControlPlane = cmp.Or(a.w.opts.CCMVersion, ccm.DefaultVersion), controlplane.K8sVersion()
	}
	fig.WriteDiffs = writeDiffsOf(calls, a.act.mark, a.act.stops)
	var lines []string
	fig.ErrorLogLines, lines = errorLogLines(a.ccmLogs(), a.act.logs)
	for _, l := range lines {
		a.env.Logf("%s: cloud-controller-manager error line: %s", a.env.Name, l)
	}
	for i, s := range a.act.stops {
		next := end
		if i+1 < len(a.act.stops) {
			next = a.act.stops[i+1].mark
		}
		// calls starts at the act's mark; each stop's stretch is a slice of it.
		from, to := min(len(calls), max(0, s.mark-a.act.mark)), min(len(calls), max(0, next-a.act.mark))
		stretch := calls[from:max(from, to)]
		sf, sd := figuresOf(stretch), diffsOf(stretch)
		fig.Stops = append(fig.Stops, s.name)
		fig.ChangedPerRestart = append(fig.ChangedPerRestart, sf.changed)
		fig.RemovedBackendsPerRestart = append(fig.RemovedBackendsPerRestart, sd.removedBackends)
		fig.ProbeRuleChangesPerRestart = append(fig.ProbeRuleChangesPerRestart, sd.probeOrRule)
	}
	res.Azure = fig
	// kill-mid-plan's bound on writes: the new leader finishes what the
	// killed one left, and a write that sends what is already stored (the
	// killed leader's landed write, sent again) is one too many.
	if res.Scenario == report.ScenarioKillMidPlan && len(f.rewrites) > 0 {
		return fmt.Errorf("kill-mid-plan: %d accepted writes changed nothing, the first %s", len(f.rewrites), f.rewrites[0])
	}
	events, err := a.serviceEvents(ctx)
	if err != nil {
		return err
	}
	fig.WarningEvents, fig.ConflictsSurfaced = serviceWarnings(events)
	if a.w.opts.SharedLB && !a.env.Mode.NodeBacked() {
		fig.Writers = writerFigures(calls)
		sharedWarnings(fig.Writers, events)
		for _, w := range fig.Writers {
			if len(w.RemovedOthers) > 0 {
				return fmt.Errorf("%s removed the other writer's %v from the shared load balancer", w.Writer, w.RemovedOthers)
			}
		}
	}
	return nil
}

// ccmLogs are the logs of the run's CCM processes.
func (a *run) ccmLogs() []string {
	var out []string
	for _, c := range a.ccm.procs {
		out = append(out, ccm.LogPath(a.env.Dir, c.name))
	}
	return out
}

// serviceEvents are the Events of the run's namespace, in the core view:
// the CCM records with the core API (a count), zerodrop with
// events.k8s.io (a series).
func (a *run) serviceEvents(ctx context.Context) ([]corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := a.env.CP.Client.CoreV1().Events(a.env.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("count Warning Events: %w", err)
	}
	return list.Items, nil
}

// serviceWarnings counts the Warning Events on Services (each occurrence
// of a series; the pods' are the workload's, not the writers'), and those
// that surfaced a conflict. A writer SIGKILLed may die with Events it
// recorded not yet sent.
func serviceWarnings(events []corev1.Event) (warnings, surfaced int64) {
	for _, e := range events {
		n := serviceWarning(e)
		warnings += n
		if n > 0 && e.Reason == service.ReasonSyncFailed && strings.Contains(e.Message, provider.ErrConflict.Error()) {
			surfaced += n
		}
	}
	return warnings, surfaced
}

// serviceWarning is how many occurrences of a Warning Event on a Service e
// stands for (its count, or its series'), 0 for any other Event.
func serviceWarning(e corev1.Event) int64 {
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Service" {
		return 0
	}
	n := int64(max(e.Count, 1))
	if e.Series != nil {
		n = max(n, int64(e.Series.Count))
	}
	return n
}
