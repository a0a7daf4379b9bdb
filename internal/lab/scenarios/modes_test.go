package scenarios

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// TestRecipeWorkload: the recipe mode's Deployment carries the recipe's
// settings from Options; the upstream mode's keeps the typical workload.
func TestRecipeWorkload(t *testing.T) {
	l := &lab{opts: Options{Recipe: Recipe{PreStopSleep: 20 * time.Second, GracePeriod: 45 * time.Second, MinReady: 15 * time.Second}}}
	d := (&run{lab: l, mode: report.ModeRecipe, ns: "ns"}).deployment(3)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 20 {
		t.Errorf("recipe preStop = %+v, want sleep 20", c.Lifecycle)
	}
	if *spec.TerminationGracePeriodSeconds != 45 || d.Spec.MinReadySeconds != 15 {
		t.Errorf("recipe grace %d, minReadySeconds %d; want 45 and 15", *spec.TerminationGracePeriodSeconds, d.Spec.MinReadySeconds)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || *ru.MaxUnavailable != intstr.FromInt32(0) || *ru.MaxSurge != intstr.FromInt32(1) {
		t.Errorf("recipe rolling update %+v, want maxUnavailable 0, maxSurge 1", ru)
	}
	up := (&run{lab: l, mode: report.ModeUpstream, ns: "ns"}).deployment(3)
	if up.Spec.Template.Spec.Containers[0].Lifecycle != nil || up.Spec.MinReadySeconds != 0 || up.Spec.Strategy.RollingUpdate != nil ||
		*up.Spec.Template.Spec.TerminationGracePeriodSeconds != 30 {
		t.Errorf("upstream workload is not the typical one: %+v", up.Spec)
	}
	if r := (&run{lab: l, mode: report.ModeRecipe}); r.steadyTimeout(3) <= (&run{lab: l, mode: report.ModeUpstream}).steadyTimeout(3) {
		t.Errorf("the recipe's steady-state bound %s does not grow with its workload", r.steadyTimeout(3))
	}
}

// TestGracePeriodOption: Options.GracePeriod sets every mode's grace period
// but the recipe's, which keeps its own.
func TestGracePeriodOption(t *testing.T) {
	l := &lab{opts: Options{GracePeriod: 12 * time.Second, Recipe: DefaultRecipe}}
	for _, m := range []report.Mode{report.ModeUpstream, report.ModeGates, report.ModeZerodrop} {
		if g := *(&run{lab: l, mode: m, ns: "ns"}).deployment(1).Spec.Template.Spec.TerminationGracePeriodSeconds; g != 12 {
			t.Errorf("%s: grace period %d s, want 12", m, g)
		}
	}
	if g := *(&run{lab: l, mode: report.ModeRecipe, ns: "ns"}).deployment(1).Spec.Template.Spec.TerminationGracePeriodSeconds; g != 60 {
		t.Errorf("recipe: grace period %d s, want its own 60", g)
	}
}

// TestTableColumns: one row per scenario and traffic policy, a column per
// mode and (for zerodrop) backend, "-" where a column did not run.
func TestTableColumns(t *testing.T) {
	res := []report.Result{
		{Scenario: "rollout", Mode: "upstream", Backend: BackendNode, ExternalTrafficPolicy: PolicyCluster, FailedRequests: 186},
		{Scenario: "rollout", Mode: "zerodrop", Backend: BackendIP, ExternalTrafficPolicy: PolicyCluster, RolloutSeconds: 14.2},
		{Scenario: "rollout", Mode: "zerodrop", Backend: BackendNode, ExternalTrafficPolicy: PolicyCluster, FailedRequests: 0},
		{Scenario: "restart-idle", Mode: "zerodrop", Backend: BackendIP, ExternalTrafficPolicy: PolicyLocal, WritesPerRestart: []int64{0, 0}},
	}
	var b bytes.Buffer
	report.WriteTable(&b, res, report.AllModes)
	out := b.String()
	for _, want := range []string{"upstream | zerodrop/ip | zerodrop/node", "rollout cluster", "186 | 0 | 0", "restart-idle local",
		"- | 0 | -", "0.0 | 14.2 | 0.0", "restart-idle local zerodrop/ip: writes per restart [0 0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestRuns: which scenarios run with and without a data plane of replicas,
// and installed from the chart; each refusal says why.
func TestRuns(t *testing.T) {
	one, reps, chart := world.OneHAProxy, world.Replicas, world.Chart
	cases := []struct {
		scenario string
		world    world.Kind
		ok       bool
	}{
		{"rollout", one, true},
		{"rollout", reps, true},
		{"rollout", chart, true},
		{report.ScenarioKillMidPlan, reps, true},
		{report.ScenarioKillMidPlan, chart, true},
		{ScenarioLBReplicaRestart, reps, true},
		{ScenarioLBReplicaRestart, chart, true},
		{ScenarioLBReplicaRestart, one, false},
		{scenarioRestartIdle, reps, false},
		{scenarioRestartIdle, chart, true},
		{report.ScenarioAPIServerDown, reps, false},
		{report.ScenarioAPIServerDown, chart, true},
		{scenarioRestartIdle, one, true},
		{"no-such-scenario", one, false},
	}
	for _, tc := range cases {
		err := Runs(tc.scenario, tc.world)
		if (err == nil) != tc.ok {
			t.Errorf("%s in %s: %v, want ok=%v", tc.scenario, tc.world, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.scenario) {
			t.Errorf("%s: the refusal %q does not name the scenario", tc.scenario, err)
		}
	}
	for _, sc := range All {
		if _, ok := WhereIs(sc.Name); !ok {
			t.Errorf("Table has no row for scenario %s", sc.Name)
		}
	}
}

// TestPlan: the seed scenarios in every mode with Local make a run per
// mode of each, but restart-idle's recipe run, which Plan names with why;
// a scenario bound to zerodrop names the modes it leaves out.
func TestPlan(t *testing.T) {
	plan, notRun, err := Plan(Options{Scenarios: []string{"rollout", "rollout-local", scenarioRestartIdle, report.ScenarioKillMidPlan},
		Modes: report.AllModes, Backends: []string{BackendIP}, TrafficPolicies: []string{PolicyLocal}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plan {
		got = append(got, p.String())
	}
	want := []string{
		"rollout node/local upstream", "rollout node/local recipe", "rollout ip/local zerodrop",
		"rollout-local node/local upstream", "rollout-local node/local recipe", "rollout-local ip/local zerodrop",
		"restart-idle node/local upstream", "restart-idle ip/local zerodrop",
		"kill-mid-plan ip/local zerodrop",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var named []string
	for _, n := range notRun {
		named = append(named, n.Scenario+" "+string(n.Mode))
		if n.Reason == "" {
			t.Errorf("%s: no reason", n)
		}
	}
	if want := []string{"restart-idle recipe", "kill-mid-plan upstream", "kill-mid-plan recipe"}; !slices.Equal(named, want) {
		t.Errorf("not run %v, want %v", named, want)
	}

	// kill-mid-plan's node/Cluster variant is left out, and said so.
	_, notRun, err = Plan(Options{Scenarios: []string{report.ScenarioKillMidPlan}, Modes: []report.Mode{report.ModeZerodrop},
		Backends: []string{BackendIP, BackendNode}, TrafficPolicies: []string{PolicyCluster, PolicyLocal}})
	if err != nil {
		t.Fatal(err)
	}
	if len(notRun) != 1 || notRun[0].Variant != "node/cluster" {
		t.Errorf("not run %v, want kill-mid-plan's node/cluster variant", notRun)
	}
}

// TestPlanMaintenancePolicy: maintenance runs with Local unless a traffic
// policy is given (its Cluster cell, for a Local cell that loses), while
// restart-idle stays bound to Local either way.
func TestPlanMaintenancePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given bool
		want  []string
	}{
		{"default policy", false, []string{"maintenance node/local upstream", "restart-idle node/local upstream"}},
		{"policy given", true, []string{"maintenance node/cluster upstream", "restart-idle node/local upstream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, _, err := Plan(Options{Scenarios: []string{scenarioMaintenance, scenarioRestartIdle}, Modes: []report.Mode{report.ModeUpstream},
				Backends: []string{BackendIP}, TrafficPolicies: []string{PolicyCluster}, PolicyGiven: tc.given})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range plan {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan %v, want %v", got, tc.want)
			}
		})
	}
}
