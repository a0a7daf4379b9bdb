package scenarios

import (
	"slices"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Where is where one scenario runs: in which worlds, and in which modes.
type Where struct {
	Scenario string
	Worlds   []world.Kind
	// Modes, when set, are the only modes the scenario runs in; Why says
	// why (Plan names the others with it).
	Modes []report.Mode
	Why   string
}

// runnerWorlds are the HAProxy worlds, where every scenario of All but
// those bound to a data plane of replicas (or its absence) runs.
var runnerWorlds = []world.Kind{world.OneHAProxy, world.Replicas, world.Chart}

// runnerAnd are the HAProxy worlds and more.
func runnerAnd(more ...world.Kind) []world.Kind { return slices.Concat(runnerWorlds, more) }

// Table is the one list of where each scenario runs, for every world:
// `all` and --dry-run's "not run" read it. Its order is the order of each
// world's scenarios where the world lists them.
var Table = []Where{
	{Scenario: "rollout", Worlds: runnerAnd(world.Azure)},
	{Scenario: "rollout-local", Worlds: runnerAnd(world.Azure)},
	{Scenario: "scale-down", Worlds: runnerAnd(world.Azure)},
	{Scenario: "drain-node", Worlds: runnerAnd(world.Azure)},
	{Scenario: "restart", Worlds: runnerAnd(world.Azure)},
	{Scenario: "churn", Worlds: runnerAnd(world.Azure)},
	// Killing the writer mid-plan needs a writer whose plans follow the
	// endpoints: the upstream controller's follow the nodes, which a
	// rollout leaves alone.
	{Scenario: report.ScenarioKillMidPlan, Worlds: runnerAnd(world.Azure), Modes: []report.Mode{report.ModeZerodrop},
		Why: "it kills zerodrop's writer at the first write of a plan; the upstream controller's plans follow the nodes, which a rollout leaves alone"},
	// restart-idle and apiserver-down are about the leader as the writer
	// of the one HAProxy, which the lab's replicas have not; installed
	// from the chart they run, on the chart's controller and data-plane
	// processes.
	{Scenario: scenarioRestartIdle, Worlds: []world.Kind{world.OneHAProxy, world.Chart, world.Azure}},
	{Scenario: report.ScenarioAPIServerDown, Worlds: []world.Kind{world.OneHAProxy, world.Chart}},
	// maintenance is restart-idle after a node's deletion taint: where
	// the writer is the one HAProxy's leader or a cloud's.
	{Scenario: scenarioMaintenance, Worlds: []world.Kind{world.OneHAProxy, world.Azure}},
	{Scenario: ScenarioLBReplicaRestart, Worlds: []world.Kind{world.Replicas, world.Chart}, Modes: []report.Mode{report.ModeZerodrop},
		Why: "it disrupts zerodrop's data plane of replicas, which the other modes have not"},
	// lb-update updates the chart's data-plane DaemonSet: only the chart's
	// install has one.
	{Scenario: report.ScenarioLBUpdate, Worlds: []world.Kind{world.Chart}, Modes: []report.Mode{report.ModeZerodrop},
		Why: "it updates zerodrop's data-plane DaemonSet, which the other modes have not"},
}

// WhereIs is scenario's row of Table.
func WhereIs(scenario string) (Where, bool) {
	i := slices.IndexFunc(Table, func(w Where) bool { return w.Scenario == scenario })
	if i < 0 {
		return Where{}, false
	}
	return Table[i], true
}

// NamesIn are the scenarios that run in world k, in Table's order.
func NamesIn(k world.Kind) []string {
	var out []string
	for _, w := range Table {
		if slices.Contains(w.Worlds, k) {
			out = append(out, w.Scenario)
		}
	}
	return out
}

// in reports whether scenario runs in world k at all.
func in(scenario string, k world.Kind) bool {
	w, ok := WhereIs(scenario)
	return ok && slices.Contains(w.Worlds, k)
}
