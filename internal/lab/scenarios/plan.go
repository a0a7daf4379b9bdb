package scenarios

import (
	"fmt"
	"slices"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Planned is one run the lab will make: a scenario in a mode, backend and
// traffic policy.
type Planned struct {
	Scenario string
	Mode     report.Mode
	Backend  string
	Policy   string
}

func (p Planned) String() string {
	return fmt.Sprintf("%s %s/%s %s", p.Scenario, p.Backend, p.Policy, p.Mode)
}

// NotRun is a scenario, or a scenario in one mode, that the options asked
// for (by name or through `all`) and the lab does not run, with why: the
// lab names each one instead of leaving it out silently.
type NotRun struct {
	Scenario string
	Mode     report.Mode // "": the scenario in every mode
	Variant  string      // "backend/policy" when only that variant is not run
	Reason   string
}

func (n NotRun) String() string {
	what := n.Scenario
	if n.Variant != "" {
		what += " " + n.Variant
	}
	if n.Mode != "" {
		what += " in " + string(n.Mode) + " mode"
	}
	return what + ": " + n.Reason
}

// Plan lists the runs Execute makes with opts, in order, and what of the
// scenarios and modes asked for it does not run, with why. It starts
// nothing: `zerodrop lab --dry-run` prints it, and runAll runs it.
func Plan(opts Options) ([]Planned, []NotRun, error) {
	var runs []Planned
	var notRun []NotRun
	seenNode := map[string]bool{}
	for _, name := range opts.Scenarios {
		sc, ok := ScenarioNamed(name)
		if !ok {
			return nil, nil, fmt.Errorf("unknown scenario %q", name)
		}
		where, _ := WhereIs(sc.Name)
		for _, mode := range opts.Modes {
			if where.Modes != nil && !slices.Contains(where.Modes, mode) {
				notRun = append(notRun, NotRun{Scenario: sc.Name, Mode: mode, Reason: where.Why})
				continue
			}
			if why := recipeIsUpstream(sc.Name); mode == report.ModeRecipe && why != "" {
				notRun = append(notRun, NotRun{Scenario: sc.Name, Mode: mode, Reason: why})
			}
		}
		all := variants(opts.Backends, opts.TrafficPolicies)
		if sc.Name == report.ScenarioKillMidPlan && slices.Contains(all, variant{BackendNode, PolicyCluster}) && slices.Contains(opts.Modes, report.ModeZerodrop) {
			notRun = append(notRun, NotRun{Scenario: sc.Name, Mode: report.ModeZerodrop, Variant: variant{BackendNode, PolicyCluster}.String(),
				Reason: "node backends with Cluster send to every node whatever the pods do: a rollout makes no plan to kill the writer in"})
		}
		for _, sv := range scenarioVariants(sc, all, opts.PolicyGiven) {
			for _, mode := range opts.Modes {
				v := sv
				if where.Modes != nil && !slices.Contains(where.Modes, mode) {
					continue
				}
				if mode.NodeBacked() {
					// The upstream controller is node-backed by nature
					// (--backend is zerodrop's): it runs once per traffic
					// policy, in the first variant of that policy.
					k := string(mode) + "/" + sc.Name + "/" + v.policy
					if seenNode[k] || mode == report.ModeRecipe && recipeIsUpstream(sc.Name) != "" {
						continue
					}
					seenNode[k] = true
					v = variant{BackendNode, v.policy}
				}
				runs = append(runs, Planned{Scenario: sc.Name, Mode: mode, Backend: v.backend, Policy: v.policy})
			}
		}
	}
	return runs, notRun, nil
}

// Runs says why scenario cannot run in world k (nil: it can), from Table;
// the reasons name the flags that choose the HAProxy worlds.
func Runs(scenario string, k world.Kind) error {
	_, ok := ScenarioNamed(scenario)
	switch {
	case !ok:
		return fmt.Errorf("unknown scenario %q", scenario)
	case k != world.Chart && onlyChart(scenario):
		return fmt.Errorf("scenario %s needs --from-chart --data-plane-replicas 2 or more: it updates the chart's data-plane DaemonSet", scenario)
	case k == world.OneHAProxy && !in(scenario, world.OneHAProxy):
		return fmt.Errorf("scenario %s needs --data-plane-replicas 2 or more", scenario)
	case k == world.Chart && !in(scenario, world.Chart):
		return fmt.Errorf("scenario %s does not run on the chart's install", scenario)
	case k == world.Replicas && !in(scenario, world.Replicas) && !in(scenario, world.Chart):
		return fmt.Errorf("scenario %s does not run with --data-plane-replicas: it restarts the writer of the one HAProxy the leader writes, which the lab's own replicas have not", scenario)
	case k == world.Replicas && !in(scenario, world.Replicas):
		return fmt.Errorf("scenario %s does not run with --data-plane-replicas without --from-chart: it restarts or cuts off the writer of the one HAProxy the leader writes, which the lab's own replicas have not; with --from-chart it kills the chart's controller and data-plane processes", scenario)
	}
	return nil
}

// recipeIsUpstream says why scenario's recipe run would be its upstream
// run ("": it is not): no pod is replaced in it, and the recipe changes
// nothing but how pods are replaced.
func recipeIsUpstream(scenario string) string {
	switch scenario {
	case scenarioRestartIdle:
		return "nothing changes but the controller, which the recipe leaves as upstream has it: its upstream run is the recipe's"
	case scenarioMaintenance:
		return "no pod is replaced (a node is tainted, the controller restarted), and the recipe changes only how pods are replaced: its upstream run is the recipe's"
	}
	return ""
}

// onlyChart: scenario runs on the chart's install only.
func onlyChart(scenario string) bool {
	w, ok := WhereIs(scenario)
	return ok && len(w.Worlds) == 1 && w.Worlds[0] == world.Chart
}
