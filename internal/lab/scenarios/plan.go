package scenarios

import (
	"fmt"
	"slices"

	"zerodrop.dev/zerodrop/internal/lab/report"
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
	Reason   string
}

func (n NotRun) String() string {
	if n.Mode == "" {
		return fmt.Sprintf("%s: %s", n.Scenario, n.Reason)
	}
	return fmt.Sprintf("%s in %s mode: %s", n.Scenario, n.Mode, n.Reason)
}

// Plan lists the runs Execute makes with opts, in order, and what of the
// scenarios and modes asked for it does not run, with why. It starts
// nothing: `zerodrop lab --dry-run` prints it, and runAll runs it.
func Plan(opts Options) ([]Planned, []NotRun, error) {
	scs, err := scenariosNamed(opts.Scenarios)
	if err != nil {
		return nil, nil, err
	}
	var runs []Planned
	var notRun []NotRun
	seenNode := map[string]bool{}
	for _, sc := range scs {
		for _, mode := range opts.Modes {
			if sc.modes != nil && !slices.Contains(sc.modes, mode) {
				notRun = append(notRun, NotRun{sc.Name, mode, sc.modesWhy})
				continue
			}
			if mode == report.ModeRecipe && sc.Name == scenarioRestartIdle {
				notRun = append(notRun, NotRun{sc.Name, mode, "nothing changes but the controller, which the recipe leaves as upstream has it: its upstream run is the recipe's"})
			}
		}
		for _, sv := range scenarioVariants(sc, variants(opts.Backends, opts.TrafficPolicies)) {
			for _, mode := range opts.Modes {
				v := sv
				if sc.modes != nil && !slices.Contains(sc.modes, mode) {
					continue
				}
				if mode.NodeBacked() {
					// The upstream controller is node-backed by nature
					// (--backend is zerodrop's): it runs once per traffic
					// policy, in the first variant of that policy.
					k := string(mode) + "/" + sc.Name + "/" + v.policy
					if seenNode[k] || mode == report.ModeRecipe && sc.Name == scenarioRestartIdle {
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

// Runs says why scenario cannot run with n data-plane replicas and, when
// fromChart, zerodrop installed from the chart (nil: it can).
func Runs(scenario string, n int, fromChart bool) error {
	sc, ok := ScenarioNamed(scenario)
	switch {
	case !ok:
		return fmt.Errorf("unknown scenario %q", scenario)
	case n == 0 && sc.dataPlane:
		return fmt.Errorf("scenario %s needs --data-plane-replicas 2 or more", scenario)
	case fromChart && scenario == report.ScenarioKillMidPlan:
		// The chart's kubelet restarts a killed container after a back-off
		// of 10 s doubling to 5 min: --kills kills (20) of two containers
		// would spend most of half an hour waiting for it.
		return fmt.Errorf("scenario %s does not run with --from-chart yet: it kills the writer %d times (--kills), and the kubelet's back-off (10 s, doubling) between a chart container's restarts would make that a run of half an hour; it runs with --data-plane-replicas without --from-chart (make chaos)",
			scenario, report.DefaultMidPlanKills)
	case n > 0 && !fromChart && !slices.Contains(dataPlaneScenarios, scenario):
		return fmt.Errorf("scenario %s does not run with --data-plane-replicas without --from-chart: it restarts or cuts off the writer of the one HAProxy the leader writes, which the lab's own replicas have not; with --from-chart it kills the chart's controller and data-plane processes", scenario)
	}
	return nil
}
