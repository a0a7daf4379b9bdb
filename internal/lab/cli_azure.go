package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/azuredp"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azure"
)

// ProviderAzureEmulator is the --provider value of the world of emulated
// Azure (package worlds/azure).
const ProviderAzureEmulator = "azure-emulator"

// AzureScenarios are the scenarios `zerodrop lab --provider
// azure-emulator` runs, from the lab's one table (scenarios.Table).
var AzureScenarios = scenarios.NamesIn(world.Azure)

// azureFlags are the flags of the world of emulated Azure.
type azureFlags struct {
	faultRate                            float64
	services                             int
	sharedLB                             bool
	ccmLBs, idleChange                   string
	ccmConfig, poolFlows, ccmVersion     string
	armLatency, lbPropagation, healthLag string
}

// azureOptions checks the flags of the lab on emulated Azure and returns
// the world's options, one per point of the sweep (every ARM latency with
// every propagation delay and every health lag); false: a usage error,
// reported on stderr.
func (f flags) azureOptions(opts scenarios.Options, stderr io.Writer) ([]azure.Options, bool) {
	for _, name := range opts.Scenarios {
		if !slices.Contains(AzureScenarios, name) {
			fmt.Fprintf(stderr, "zerodrop lab: --provider %s runs %s, not %s\n", ProviderAzureEmulator, strings.Join(AzureScenarios, ", "), name)
			return nil, false
		}
	}
	az := f.az
	var bad string
	switch {
	case az.faultRate < 0 || az.faultRate >= 1:
		bad = fmt.Sprintf("--azure-fault-rate %v: want a share from 0 to below 1", az.faultRate)
	case !slices.Contains(azure.CCMLayouts, az.ccmLBs):
		bad = fmt.Sprintf("--azure-ccm-lbs %q: want %s", az.ccmLBs, strings.Join(azure.CCMLayouts, " or "))
	case !slices.Contains(azure.IdleChanges, az.idleChange):
		bad = fmt.Sprintf("--azure-idle-change %q: want %s", az.idleChange, strings.Join(azure.IdleChanges, " or "))
	case az.services < 0 || az.services > azure.MaxServices:
		bad = fmt.Sprintf("--azure-services %d: want 0 to %d", az.services, azure.MaxServices)
	case !slices.Contains(ccm.Configs, az.ccmConfig):
		bad = fmt.Sprintf("--azure-ccm-config %q: want %s", az.ccmConfig, strings.Join(ccm.Configs, " or "))
	case az.idleChange == azure.IdleChangePoolDrift && az.ccmConfig == ccm.ConfigNodeIP:
		bad = fmt.Sprintf("--azure-idle-change %s takes a node out of NIC-based pools: it needs --azure-ccm-config vmss or standard, not %s", az.idleChange, az.ccmConfig)
	case az.ccmConfig == ccm.ConfigVMSS && az.ccmLBs != azure.CCMSingleLB:
		bad = fmt.Sprintf("--azure-ccm-lbs %s places nodes by availability set: not with --azure-ccm-config %s", az.ccmLBs, az.ccmConfig)
	case !releaseTag.MatchString(az.ccmVersion):
		bad = fmt.Sprintf("--azure-ccm-version %q: want a release tag of cloud-provider-azure (%s, say)", az.ccmVersion, ccm.DefaultVersion)
	case !slices.Contains(azuredp.PoolFlowOptions, az.poolFlows):
		bad = fmt.Sprintf("--azure-pool-flows %q: want %s", az.poolFlows, strings.Join(azuredp.PoolFlowOptions, " or "))
	case az.sharedLB && az.ccmLBs != azure.CCMSingleLB:
		bad = fmt.Sprintf("--azure-shared-lb shares the CCM's one internal load balancer: not with --azure-ccm-lbs %s", az.ccmLBs)
	case f.dataPlane != 0 || f.fromChart:
		bad = fmt.Sprintf("--data-plane-replicas and --from-chart are the HAProxy data plane's, not --provider %s's", ProviderAzureEmulator)
	}
	if bad != "" {
		fmt.Fprintf(stderr, "zerodrop lab: %s\n", bad)
		return nil, false
	}
	lists := map[string][]time.Duration{}
	for _, fl := range []struct{ name, v string }{{"arm-latency", az.armLatency}, {"lb-propagation", az.lbPropagation}, {"health-lag", az.healthLag}} {
		ds, err := durations(fl.v)
		if err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: --%s %q: %v\n", fl.name, fl.v, err)
			return nil, false
		}
		lists[fl.name] = ds
	}
	var bin string
	if !f.dryRun && (az.sharedLB || slices.ContainsFunc(opts.Modes, report.Mode.NodeBacked)) {
		var err error
		if bin, err = ccm.BinaryVersion(az.ccmVersion); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return nil, false
		}
	}
	var points []azure.Options
	for _, a := range lists["arm-latency"] {
		for _, p := range lists["lb-propagation"] {
			for _, h := range lists["health-lag"] {
				points = append(points, azure.Options{ARMLatency: a, LBPropagation: p, HealthLag: h, CCMBinary: bin,
					Services: az.services, FaultRate: az.faultRate, CCMLoadBalancers: az.ccmLBs, SharedLB: az.sharedLB, IdleChange: az.idleChange,
					CCMConfig: az.ccmConfig, PoolFlows: az.poolFlows, CCMVersion: az.ccmVersion})
			}
		}
	}
	return points, true
}

// releaseTag is a release's tag, as hack/cloud-provider-azure.sh takes it.
var releaseTag = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// declareConfigFlags declares the flags of the CCM's configuration and of the
// data plane's flows (issue 48).
func (az *azureFlags) declareConfigFlags(fs *flag.FlagSet) {
	fs.StringVar(&az.ccmConfig, "azure-ccm-config", ccm.ConfigNodeIP, "with --provider "+ProviderAzureEmulator+": cloud-provider-azure's configuration: "+
		ccm.ConfigNodeIP+" (vmType standard, pools of node IPs), "+ccm.ConfigVMSS+" (azure.json's defaults: the nodes a scale set's instances, NIC-based pools) or "+
		ccm.ConfigStandard+" (the nodes VMs in an availability set, NIC-based pools)")
	fs.StringVar(&az.poolFlows, "azure-pool-flows", azuredp.PoolFlowsKeep, "with --provider "+ProviderAzureEmulator+": what the data plane does with an established flow whose address leaves a pool: "+
		azuredp.PoolFlowsKeep+" (it continues) or "+azuredp.PoolFlowsReset+" (its next packet is answered with a TCP reset); no public source says which Azure does")
	fs.StringVar(&az.ccmVersion, "azure-ccm-version", ccm.DefaultVersion, "with --provider "+ProviderAzureEmulator+": the release of cloud-provider-azure whose CCM runs ("+
		ccm.DefaultVersion+", or "+ccm.Version133+" of the minor the #10224 incident ran, say), built on first use and cached; the control plane is "+
		"ZERODROP_K8S_VERSION's (see the report's control plane line): run a release against a control plane of its own minor")
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
// control plane, and returns every run's result together; a point runs the
// modes runsAt allows there.
func executeSweep(ctx context.Context, opts scenarios.Options, points []azure.Options, stderr io.Writer) ([]report.Result, error) {
	var results []report.Result
	for i := range points {
		o := opts
		o.World = azure.New(points[i])
		o.Modes = slices.DeleteFunc(slices.Clone(o.Modes), func(m report.Mode) bool { return !runsAt(m, points[i], points[0]) })
		if len(o.Modes) == 0 {
			continue
		}
		fmt.Fprintf(stderr, "zerodrop lab: sweep point %d of %d: %s\n", i+1, len(points), points[i].Clock())
		rs, err := scenarios.Execute(ctx, o)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// writeAzureFigures prints, after the table, what the world of emulated
// Azure counted in each run's act from the emulator's record.
func writeAzureFigures(w io.Writer, results []report.Result) {
	for _, r := range results {
		a := r.Azure
		if a == nil {
			continue
		}
		name := r.Scenario + " " + r.Mode
		fmt.Fprintf(w, "%s: %d LB PUTs, %d pool PUTs (%d changed something), %d 412s, %d 409s, %d superseded; %d faults injected, %d conflicts retried, %d Warning Events (%d surfaced a conflict), %d CCM error log lines\n",
			name, a.LBPuts, a.PoolPuts, a.WritesChanged, a.PreconditionFailed, a.Conflicts, a.Superseded, a.Faults, a.ConflictsRetried,
			a.WarningEvents, a.ConflictsSurfaced, a.ErrorLogLines)
		if len(a.Stops) > 0 {
			conf := ""
			if a.CCMLoadBalancers != "" {
				conf += ", " + a.CCMLoadBalancers + " load balancer layout"
			}
			if a.IdleChange != "" {
				conf += ", " + a.IdleChange + " during each outage"
			}
			fmt.Fprintf(w, "%s%s: stops %v; writes %v, that changed something %v, backend addresses removed %v, probe or rule changes %v\n",
				name, conf, a.Stops, r.WritesPerRestart, a.ChangedPerRestart, a.RemovedBackendsPerRestart, a.ProbeRuleChangesPerRestart)
		}
		if a.CCMRelease != "" {
			fmt.Fprintf(w, "%s: cloud-provider-azure %s, control plane %s\n", name, a.CCMRelease, a.ControlPlane)
		}
		for _, d := range a.WriteDiffs {
			fmt.Fprintf(w, "%s: write after stop %d: %s\n", name, d.AfterStop, d.Call)
			for _, ch := range d.Changes {
				fmt.Fprintf(w, "    %s\n", ch)
			}
			if d.Omitted > 0 {
				fmt.Fprintf(w, "    (%d more changes)\n", d.Omitted)
			}
		}
		for _, wf := range a.Writers {
			fmt.Fprintf(w, "%s: %s: %d writes, %d 412s, %d 409s, %d superseded, %d Warning Events, removed of the other writer's: %v\n",
				name, wf.Writer, wf.Writes, wf.PreconditionFailed, wf.Conflicts, wf.Superseded, wf.WarningEvents, wf.RemovedOthers)
		}
	}
}
