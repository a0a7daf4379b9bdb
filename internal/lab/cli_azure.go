package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azure"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azurewrites"
)

// AzureTrafficScenarios are the scenarios `zerodrop lab --provider
// azure-emulator` runs with traffic through the emulated load balancer (the
// HAProxy lab's scenarios on emulated Azure); its other scenarios count ARM
// writes (package worlds/azurewrites).
var AzureTrafficScenarios = scenarios.NamesIn(world.AzureTraffic)

// azureTraffic reports whether --scenario names a traffic scenario:
// restart-idle is both a traffic scenario and one of the emulator lab's, and
// runs with traffic when named beside another traffic scenario.
func azureTraffic(scenario string) bool {
	for _, name := range strings.Split(scenario, ",") {
		if name = strings.TrimSpace(name); name != "restart-idle" && slices.Contains(AzureTrafficScenarios, name) {
			return true
		}
	}
	return false
}

// azureOptions checks the flags of the traffic lab on emulated Azure and
// returns its clocks, one per point of the sweep (every ARM latency with
// every propagation delay and every health lag); false: a usage error,
// reported on stderr.
func (f flags) azureOptions(opts scenarios.Options, stderr io.Writer) ([]azure.Options, bool) {
	for _, name := range opts.Scenarios {
		if !slices.Contains(AzureTrafficScenarios, name) {
			fmt.Fprintf(stderr, "zerodrop lab: --provider %s runs %s with traffic and %s without (ARM writes only), not both at once: %s is of the second kind\n",
				azurewrites.ProviderAzureEmulator, strings.Join(AzureTrafficScenarios, ", "), strings.Join(azurewrites.AzureScenarios, ", "), name)
			return nil, false
		}
	}
	if f.faultRate != 0 || f.idleChange != azurewrites.IdleChangeNone || f.ccmLBs != azurewrites.CCMSingleLB {
		fmt.Fprintf(stderr, "zerodrop lab: --azure-fault-rate, --azure-idle-change and --azure-ccm-lbs are the emulator lab's (%s), not the traffic scenarios' of --provider %s\n",
			strings.Join(azurewrites.AzureScenarios, ", "), azurewrites.ProviderAzureEmulator)
		return nil, false
	}
	if f.dataPlane != 0 || f.fromChart {
		fmt.Fprintf(stderr, "zerodrop lab: --data-plane-replicas and --from-chart are the HAProxy data plane's, not --provider %s's\n", azurewrites.ProviderAzureEmulator)
		return nil, false
	}
	lists := map[string][]time.Duration{}
	for _, fl := range []struct{ name, v string }{{"arm-latency", f.armLatency}, {"lb-propagation", f.lbPropagation}, {"health-lag", f.healthLag}} {
		ds, err := durations(fl.v)
		if err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: --%s %q: %v\n", fl.name, fl.v, err)
			return nil, false
		}
		lists[fl.name] = ds
	}
	var bin string
	if !f.dryRun && slices.ContainsFunc(opts.Modes, report.Mode.NodeBacked) {
		var err error
		if bin, err = ccm.Binary(); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return nil, false
		}
	}
	var points []azure.Options
	for _, a := range lists["arm-latency"] {
		for _, p := range lists["lb-propagation"] {
			for _, h := range lists["health-lag"] {
				points = append(points, azure.Options{ARMLatency: a, LBPropagation: p, HealthLag: h, CCMBinary: bin})
			}
		}
	}
	return points, true
}

// durations parses a comma-separated list of durations, each 0 or more,
// none twice.
func durations(v string) ([]time.Duration, error) {
	var out []time.Duration
	for _, s := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("%s is negative", d)
		}
		if slices.Contains(out, d) {
			return nil, fmt.Errorf("%s twice", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// writeSweepPlan adds to --dry-run's answer what a sweep multiplies the
// plan by: the points, in order, and the runs at each (runsAt).
func writeSweepPlan(w io.Writer, plan []scenarios.Planned, points []azure.Options) {
	if len(points) < 2 {
		return
	}
	total := 0
	fmt.Fprintf(w, "the runs above at each of %d sweep points, one lab per point:\n", len(points))
	for _, p := range points {
		n := 0
		for _, r := range plan {
			if runsAt(r.Mode, p, points[0]) {
				n++
			}
		}
		total += n
		fmt.Fprintf(w, "  %s: %d runs\n", p.Clock(), n)
	}
	fmt.Fprintf(w, "%d runs in all\n", total)
}

// runsAt says whether mode runs at sweep point p: the rule-health lag is
// read only by the gated modes, so a point whose lag is not the first's
// runs those only.
func runsAt(mode report.Mode, p, first azure.Options) bool {
	return p.HealthLag == first.HealthLag || mode.Gated()
}

// executeSweep runs the lab once per point of the sweep, each with its own
// control plane, and reports every run together; a point runs the modes
// runsAt allows there.
func executeSweep(ctx context.Context, opts scenarios.Options, points []azure.Options, notRun []string, jsonPath, htmlPath string, stdout, stderr io.Writer) int {
	start := time.Now()
	var results []report.Result
	var err error
	for i := range points {
		o := opts
		o.World = azure.New(points[i])
		o.Modes = slices.DeleteFunc(slices.Clone(o.Modes), func(m report.Mode) bool { return !runsAt(m, points[i], points[0]) })
		if len(o.Modes) == 0 {
			continue
		}
		fmt.Fprintf(stderr, "zerodrop lab: sweep point %d of %d: %s\n", i+1, len(points), points[i].Clock())
		var rs []report.Result
		rs, err = scenarios.Execute(ctx, o)
		results = append(results, rs...)
		if err != nil {
			break
		}
	}
	return finish(start, opts, results, err, notRun, jsonPath, htmlPath, stdout, stderr)
}
