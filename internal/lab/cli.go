// Package lab is `zerodrop lab`: real rollouts under real traffic, the real
// upstream service controller (with a typical workload, and with the
// published recipe) and zerodrop side by side. It starts a real
// kube-apiserver + etcd + kube-controller-manager, nodes and pods in network
// namespaces with the real kube-proxy, a node agent that runs each pod
// (probes, preStop hooks, SIGTERM, grace period), a real HAProxy per run
// driven by controller processes (`zerodrop controller`, or the upstream
// controller's cloud-controller-manager), and bounded traffic: requests and
// WebSockets. This package is the command: its flags and
// subcommands; the lab itself is in its subpackages (docs/design.md). See
// docs/lab.md.
package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lab/outside"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/upstream"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/aws"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azure"
	"zerodrop.dev/zerodrop/internal/lab/worlds/chart"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/lab/worlds/haproxy"
	"zerodrop.dev/zerodrop/internal/lab/worlds/replicas"
)

// Run is the `zerodrop lab` command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == scenarios.UpstreamCommand {
		// A controller pod of the upstream and recipe modes.
		return upstream.Main(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == azure.Command {
		// A controller pod on emulated Azure.
		return azure.ControllerMain(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == aws.Command {
		// A controller pod on emulated AWS (gates mode).
		return aws.ControllerMain(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == outside.Command {
		// The outside client, in the client namespace (--outside-client-rate).
		return outside.Main(args[1:], stderr)
	}
	f, code, ok := parseFlags(args, stderr)
	if !ok {
		return code
	}
	if f.prov != "haproxy" && f.prov != ProviderAzureEmulator && f.prov != ProviderAWSEmulator {
		fmt.Fprintf(stderr, "zerodrop lab: unknown provider %q (haproxy, %s, %s)\n", f.prov, ProviderAzureEmulator, ProviderAWSEmulator)
		return 2
	}
	opts, notRun, err := f.options(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
		return 2
	}
	var points []azure.Options
	opts.World = f.haproxyWorld()
	if f.prov == ProviderAzureEmulator {
		if points, ok = f.azureOptions(opts, stderr); !ok {
			return 2
		}
		opts.World = azure.New(points[0])
	}
	if f.prov == ProviderAWSEmulator {
		w, ok := f.awsWorld(&opts, stderr)
		if !ok {
			return 2
		}
		opts.World = w
	}
	plan, planNotRun, err := scenarios.Plan(opts)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
		return 2
	}
	for _, n := range planNotRun {
		notRun = append(notRun, n.String())
	}
	htmlPath, err := f.html()
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
		return 2
	}
	if f.dryRun {
		writePlan(stdout, plan, notRun, htmlPath, f.jsonPath)
		writeSweepPlan(stdout, plan, points)
		writeWorld(stdout, opts.World, len(points))
		return 0
	}
	for _, n := range notRun {
		fmt.Fprintf(stderr, "zerodrop lab: not run: %s\n", n)
	}
	return execute(ctx, opts, points, notRun, f.jsonPath, htmlPath, stdout, stderr)
}

// flags are `zerodrop lab`'s command line, parsed.
type flags struct {
	scenario, mode, backend, policy, jsonPath, htmlPath, dir, appSigterm, prov, maintenanceSignal string
	// dataPlaneUpdate is --data-plane-update ("": the chart's default),
	// hardStopAfter --data-plane-hard-stop-after (0: the chart's).
	dataPlaneUpdate string
	hardStopAfter   time.Duration
	// router is --router, unbalancedTimer --router-unbalanced-timer.
	router          string
	unbalancedTimer time.Duration
	// updateRollouts is --data-plane-update-rollouts.
	updateRollouts bool
	// dataPlaneGrace is --data-plane-grace-period, timedMax
	// --timed-websockets-max.
	dataPlaneGrace, timedMax time.Duration
	// updateEnd is --data-plane-update-end.
	updateEnd                     string
	keep, fromChart, dryRun       bool
	rate, dataPlane, idleRestarts int
	az                            azureFlags
	aws                           awsFlags
	recipe                        scenarios.Recipe
	gracePeriod, maintenanceWait  time.Duration
	// policyGiven: --traffic-policy was on the command line; recipeGiven:
	// a --recipe-* flag was.
	policyGiven, recipeGiven bool
	chaos                    scenarios.ChaosOptions
	// outsideRate is --outside-client-rate.
	outsideRate int
}

// parseFlags parses args; ok false: exit with code (0 for -help, 2 for a
// usage error, already reported on stderr).
func parseFlags(args []string, stderr io.Writer) (f flags, code int, ok bool) {
	fs := flag.NewFlagSet("zerodrop lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.scenario, "scenario", "rollout", "comma-separated: rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down, lb-replica-restart (with --data-plane-replicas), lb-update (with --from-chart), or all")
	fs.StringVar(&f.mode, "mode", "all", "comma-separated: upstream,recipe,zerodrop, or all (with --provider azure-emulator, upstream and recipe are the real cloud-provider-azure, and gates is that CCM with zerodrop's gates only)")
	fs.StringVar(&f.backend, "backend", scenarios.BackendIP, "ip|node|both: the load balancer sends to pod IPs, or to node IP:nodePort through kube-proxy")
	fs.StringVar(&f.policy, "traffic-policy", scenarios.PolicyCluster, "cluster|local|both: the Service's externalTrafficPolicy (rollout-local and restart-idle run with local whatever it says; maintenance with local unless it is given and maintenance is named, not through all)")
	fs.StringVar(&f.jsonPath, "json", "", "write the JSON report to `FILE`")
	fs.StringVar(&f.htmlPath, "html", "", "write an HTML report with timelines to `FILE` (default: "+defaultHTML+" in the repository)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "check the flags and scenarios and print the runs the lab would make and what it would not run, with why; start nothing")
	fs.IntVar(&f.idleRestarts, "idle-restarts", scenarios.DefaultIdleRestarts, "restart-idle and maintenance: how often to restart the load balancer's writer (SIGKILL and SIGTERM in turn)")
	fs.DurationVar(&f.maintenanceWait, "maintenance-wait", scenarios.DefaultMaintenanceWait, "maintenance: how long the tainted node stays, nothing else changed, before the first restart")
	fs.StringVar(&f.maintenanceSignal, "maintenance-signal", report.SignalTaint, "maintenance: how the node is marked leaving: "+
		report.SignalTaint+" (the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint) or "+report.SignalExcludeLabel+
		" (the node.kubernetes.io/exclude-from-external-load-balancers label)")
	fs.BoolVar(&f.keep, "keep", false, "keep the work directory (logs of every process) and print its path")
	fs.StringVar(&f.dir, "dir", "", "work directory (default: a new temporary one); kept")
	fs.IntVar(&f.rate, "rate", traffic.DefaultRate, "open-loop requests per `second` (each on a fresh connection)")
	fs.IntVar(&f.outsideRate, "outside-client-rate", 0, "also run an outside client, a process of its own in the client namespace (open loop, GET on a new connection each), at `N` requests per second beside each run's traffic, and report its failed fraction beside the lab's; 0: none")
	fs.DurationVar(&f.gracePeriod, "grace-period", scenarios.DefaultGracePeriod, "the workload pods' terminationGracePeriodSeconds in every mode but recipe (whole seconds, at least 1s): the gates' bound is this minus the shutdown budget")
	f.recipe = scenarios.DefaultRecipe
	fs.DurationVar(&f.recipe.PreStopSleep, "recipe-prestop-sleep", scenarios.DefaultRecipe.PreStopSleep, "recipe mode: the pods' preStop sleep")
	fs.DurationVar(&f.recipe.GracePeriod, "recipe-grace-period", scenarios.DefaultRecipe.GracePeriod, "recipe mode: terminationGracePeriodSeconds")
	fs.DurationVar(&f.recipe.MinReady, "recipe-min-ready", scenarios.DefaultRecipe.MinReady, "recipe mode: the Deployment's minReadySeconds")
	fs.IntVar(&f.chaos.MidPlanKills, "kills", 0, fmt.Sprintf("kill-mid-plan: how often to SIGKILL the writer at a plan's first write (default %d; %d with --from-chart, where each kill waits out the kubelet's back-off)",
		report.DefaultMidPlanKills, chart.DefaultKills))
	fs.DurationVar(&f.chaos.APIServerOutage, "apiserver-outage", report.DefaultAPIServerOutage, "apiserver-down: how long kube-apiserver stays stopped")
	fs.StringVar(&f.appSigterm, "app-sigterm", traffic.AppSigtermGraceful, "graceful|exit: the workload's SIGTERM handling — a graceful shutdown, or none (exit at once, every connection closed without a word)")
	fs.Float64Var(&f.az.faultRate, "azure-fault-rate", 0, "with --provider "+ProviderAzureEmulator+": the share of ARM requests that fail (412, 429, 500, slow) during each scenario's act, e.g. 0.2")
	fs.StringVar(&f.az.idleChange, "azure-idle-change", azure.IdleChangeNone, "with --provider "+ProviderAzureEmulator+": what restart-idle changes while the writer is down: "+strings.Join(azure.IdleChanges, " or ")+" (endpoints-move: every Local other Service's endpoints move to other nodes, see --azure-services; pool-drift: one node's machine is rewritten out of band without the NIC-based pool, as infrastructure code would)")
	fs.StringVar(&f.az.ccmLBs, "azure-ccm-lbs", azure.CCMSingleLB, "with --provider "+ProviderAzureEmulator+": cloud-provider-azure with one Standard load balancer ("+azure.CCMSingleLB+") or "+azure.CCMMultipleLBs+" (multipleStandardLoadBalancerConfigurations: two, nodes placed by availability set)")
	f.az.declareConfigFlags(fs)
	f.aws.declare(fs)
	fs.IntVar(&f.az.services, "azure-services", 0, "with --provider "+ProviderAzureEmulator+": `N` other Services beside the workload's, node-backed, half of them Local, without traffic (their endpoints written by the lab): the load balancer's other tenants")
	fs.BoolVar(&f.az.sharedLB, "azure-shared-lb", false, "with --provider "+ProviderAzureEmulator+": zerodrop mode writes the CCM's internal load balancer, with the CCM running beside it and writing the other Services (--azure-services)")
	fs.StringVar(&f.az.armLatency, "arm-latency", azure.DefaultARMLatency.String(), "with --provider "+ProviderAzureEmulator+": how long an ARM write's operation takes (a GET shows Updating until then); a comma-separated list sweeps")
	fs.StringVar(&f.az.lbPropagation, "lb-propagation", "0s", "with --provider "+ProviderAzureEmulator+": how long after ARM's operation ends the data plane applies a write (no client can see it); a list sweeps")
	fs.StringVar(&f.az.healthLag, "health-lag", "0s", "with --provider "+ProviderAzureEmulator+": how old the rule-health operation's answer is (zerodrop mode reads it); a list sweeps")
	fs.BoolVar(&f.fromChart, "from-chart", false, "zerodrop mode: install zerodrop from the repository's chart (helm template, applied per run; the data plane a DaemonSet on the load-balancer hosts), with --data-plane-replicas")
	fs.IntVar(&f.dataPlane, "data-plane-replicas", 0, "zerodrop mode: an HAProxy data plane of `N` replicas (2 to 4), each written only by its own zerodrop process (--role=data-plane), the controllers in --role=control, the client routed to all by a resilient nexthop group; 0: one HAProxy written by the leader")
	fs.StringVar(&f.dataPlaneUpdate, "data-plane-update", "", "with --from-chart: the data-plane DaemonSet's update strategy, set through the chart's haproxy.updateStrategy: "+
		report.UpdateSurge+" (maxSurge 1, maxUnavailable 0) or "+report.UpdateUnavailable+" (maxSurge 0, maxUnavailable 1: lb-update's negative control); empty: the chart's default")
	fs.DurationVar(&f.dataPlaneGrace, "data-plane-grace-period", 0, "with --from-chart: the chart's terminationGracePeriodSeconds (whole seconds); 0: the chart's default")
	fs.DurationVar(&f.timedMax, "timed-websockets-max", 0, "lb-update: the longest timed WebSocket's lifetime (they spread over 0 to it); 0: twice the old pods' drain bound")
	fs.StringVar(&f.updateEnd, "data-plane-update-end", "old-gone", "lb-update: when the update ends: old-gone (every old pod gone) or new-ready (every node's new pod Ready and every old pod terminating: with a --data-plane-grace-period longer than the scenario, the old pods drain past its end and the lab's whole-run WebSockets end with the traffic)")
	fs.BoolVar(&f.updateRollouts, "data-plane-update-rollouts", false, "lb-update: roll the workload's Deployment out again and again while the data plane's DaemonSet updates, so each node's surge meets a rollout's gates (they count both pods of a node as replicas); its figures add the rollouts' times")
	fs.DurationVar(&f.hardStopAfter, "data-plane-hard-stop-after", 0, "with --from-chart: the chart's haproxy.hardStopAfter, which bounds an old HAProxy's drain (lb-update's timed WebSockets live up to twice the bound); 0: the chart's default")
	fs.StringVar(&f.router, "router", string(dataplane.RouterStandIn), "with --from-chart: the router in front of the data plane: stand-in (the lab announces a host once its data-plane pod is Ready, into a resilient nexthop group), frr-ecmp (FRR's bgpd and zebra peering with the chart's speaker DaemonSet, haproxy.bgp, on every data-plane node; zebra installs hash-threshold ECMP) or frr-resilient (the same FRR; the lab installs bgpd's routes as resilient nexthop groups)")
	fs.DurationVar(&f.unbalancedTimer, "router-unbalanced-timer", 0, "with --router frr-resilient: the kernel's unbalanced timer of the lab's resilient nexthop groups (whole seconds): once a group has been unbalanced that long (a node returned, holding fewer buckets than its share), buckets move to it even if not idle, breaking the flows on them; 0: none, a node that returns gets only buckets idle for the idle timer (120 s)")
	fs.StringVar(&f.prov, "provider", "haproxy", "haproxy|"+ProviderAzureEmulator+"|"+ProviderAWSEmulator+" (azure-emulator: the scenarios with traffic through an emulated Azure load balancer, written by the real cloud-provider-azure or by zerodrop; see docs/azure.md; aws-emulator: through an emulated AWS Network Load Balancer written by the real cloud-provider-aws, see docs/aws.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: zerodrop lab [--scenario rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down,lb-replica-restart,lb-update|all] [--mode upstream,recipe,zerodrop|all] [--backend ip|node|both] [--traffic-policy cluster|local|both] [--provider haproxy|azure-emulator [--arm-latency LIST] [--lb-propagation LIST] [--health-lag LIST]|aws-emulator [--aws-registration-delay D] [--aws-propagation D]] [--rate N] [--json FILE] [--html FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flags{}, 0, false
		}
		return flags{}, 2, false
	}
	fs.Visit(func(fl *flag.Flag) {
		f.policyGiven = f.policyGiven || fl.Name == "traffic-policy"
		f.recipeGiven = f.recipeGiven || strings.HasPrefix(fl.Name, "recipe-")
	})
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop lab: unexpected arguments %v\n", fs.Args())
		return flags{}, 2, false
	}
	if !slices.Contains(report.MaintenanceSignals, f.maintenanceSignal) {
		fmt.Fprintf(stderr, "zerodrop lab: --maintenance-signal %q: want %s\n", f.maintenanceSignal, strings.Join(report.MaintenanceSignals, " or "))
		return flags{}, 2, false
	}
	if f.chaos.MidPlanKills < 0 || f.chaos.APIServerOutage < time.Second || f.idleRestarts < 1 || f.maintenanceWait < time.Second {
		fmt.Fprintln(stderr, "zerodrop lab: --kills must be 1 or more (0: its default), --idle-restarts at least 1, --apiserver-outage and --maintenance-wait at least 1s")
		return flags{}, 2, false
	}
	return f, 0, true
}

// options checks the flags of the HAProxy lab and turns them into the
// scenarios' Options (progress on stderr), with the scenarios `all` leaves
// out and why; an error is a usage error.
func (f flags) options(stderr io.Writer) (scenarios.Options, []string, error) {
	if f.rate <= 0 || f.rate > 2000 {
		return scenarios.Options{}, nil, fmt.Errorf("--rate %d: want 1 to 2000 requests per second", f.rate)
	}
	if f.outsideRate < 0 || f.outsideRate > 2000 {
		return scenarios.Options{}, nil, fmt.Errorf("--outside-client-rate %d: want 0 (none) or up to 2000 requests per second", f.outsideRate)
	}
	for _, d := range []time.Duration{f.recipe.PreStopSleep, f.recipe.GracePeriod, f.recipe.MinReady} {
		if d < 0 || d%time.Second != 0 {
			return scenarios.Options{}, nil, fmt.Errorf("recipe durations are whole seconds, not %s", d)
		}
	}
	if f.gracePeriod < time.Second || f.gracePeriod%time.Second != 0 {
		return scenarios.Options{}, nil, fmt.Errorf("--grace-period %s: want whole seconds, at least 1s", f.gracePeriod)
	}
	if f.dataPlane != 0 && (f.dataPlane < 2 || f.dataPlane > dataplane.MaxReplicas) {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-replicas %d: want 0, or 2 to %d", f.dataPlane, dataplane.MaxReplicas)
	}
	if r := dataplane.Router(f.router); !slices.Contains(dataplane.Routers, r) || r.FRR() && (!f.fromChart || f.backend != scenarios.BackendIP) {
		return scenarios.Options{}, nil, fmt.Errorf("--router %q: want stand-in, or frr-ecmp or frr-resilient with --from-chart and --backend ip", f.router)
	}
	if f.unbalancedTimer < 0 || f.unbalancedTimer%time.Second != 0 || f.unbalancedTimer > 0 && dataplane.Router(f.router) != dataplane.RouterFRRResilient {
		return scenarios.Options{}, nil, fmt.Errorf("--router-unbalanced-timer %s: want whole seconds, with --router frr-resilient", f.unbalancedTimer)
	}
	if f.dataPlaneUpdate != "" && (!f.fromChart || !slices.Contains(report.UpdateStrategies, f.dataPlaneUpdate)) {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-update %q: want %s with --from-chart", f.dataPlaneUpdate, strings.Join(report.UpdateStrategies, " or "))
	}
	if f.hardStopAfter < 0 || f.hardStopAfter > 0 && !f.fromChart {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-hard-stop-after %s: want a positive duration, with --from-chart", f.hardStopAfter)
	}
	if f.dataPlaneGrace < 0 || f.dataPlaneGrace%time.Second != 0 || f.dataPlaneGrace > 0 && !f.fromChart {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-grace-period %s: want whole seconds, with --from-chart", f.dataPlaneGrace)
	}
	if f.timedMax < 0 || f.timedMax > 0 && f.timedMax < time.Second {
		return scenarios.Options{}, nil, fmt.Errorf("--timed-websockets-max %s: want 1s or more (0: twice the drain bound)", f.timedMax)
	}
	if f.updateEnd != "old-gone" && f.updateEnd != "new-ready" {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-update-end %q: want old-gone or new-ready", f.updateEnd)
	}
	if f.updateRollouts && !f.fromChart {
		return scenarios.Options{}, nil, fmt.Errorf("--data-plane-update-rollouts is lb-update's, with --from-chart")
	}
	if f.fromChart && f.dataPlane == 0 {
		return scenarios.Options{}, nil, fmt.Errorf("--from-chart installs the chart's HAProxy data plane: give --data-plane-replicas 2 to %d", dataplane.MaxReplicas)
	}
	opts := scenarios.Options{KeepDir: f.keep, Dir: f.dir, Progress: stderr, Rate: f.rate, OutsideRate: f.outsideRate, Recipe: f.recipe, Chaos: f.chaos,
		IdleRestarts: f.idleRestarts, GracePeriod: f.gracePeriod, MaintenanceWait: f.maintenanceWait, MaintenanceSignal: f.maintenanceSignal,
		UpdateRollouts: f.updateRollouts, TimedMax: f.timedMax, UpdateEndNewReady: f.updateEnd == "new-ready"}
	switch f.appSigterm {
	case traffic.AppSigtermGraceful:
	case traffic.AppSigtermExit:
		opts.AppExitOnSIGTERM = true
	default:
		return scenarios.Options{}, nil, fmt.Errorf("--app-sigterm %q: want %s or %s", f.appSigterm, traffic.AppSigtermGraceful, traffic.AppSigtermExit)
	}
	notRun, err := f.addScenarios(&opts)
	if err != nil {
		return scenarios.Options{}, nil, err
	}
	if opts.Modes = parseModes(f.mode); opts.Modes == nil {
		return scenarios.Options{}, nil, fmt.Errorf("--mode %q: want upstream, recipe, zerodrop (comma-separated; gates with --provider %s or %s) or all", f.mode, ProviderAzureEmulator, ProviderAWSEmulator)
	}
	if slices.Contains(opts.Modes, report.ModeGates) && f.prov != ProviderAzureEmulator && f.prov != ProviderAWSEmulator {
		return scenarios.Options{}, nil, fmt.Errorf("--mode gates keeps the cloud's own writer and adds zerodrop's gates: it runs with --provider %s or %s only", ProviderAzureEmulator, ProviderAWSEmulator)
	}
	var ok bool
	if opts.Backends, ok = oneOrBoth(f.backend, scenarios.BackendIP, scenarios.BackendNode); !ok {
		return scenarios.Options{}, nil, fmt.Errorf("--backend %q: want ip, node or both", f.backend)
	}
	if opts.TrafficPolicies, ok = oneOrBoth(f.policy, scenarios.PolicyCluster, scenarios.PolicyLocal); !ok {
		return scenarios.Options{}, nil, fmt.Errorf("--traffic-policy %q: want cluster, local or both", f.policy)
	}
	// `--scenario all --traffic-policy both` keeps maintenance in Local
	// (each of its runs waits --maintenance-wait): its other policy is
	// run by naming it.
	opts.PolicyGiven = f.policyGiven && !slices.Contains(strings.Split(f.scenario, ","), "all")
	return opts, notRun, nil
}

// addScenarios adds the scenarios --scenario names to opts: "all" adds
// every scenario that runs with the data plane and install asked for and
// returns the others, each with why it does not run; a scenario named that
// cannot run is a usage error, which says why.
func (f flags) addScenarios(opts *scenarios.Options) (notRun []string, err error) {
	for _, name := range strings.Split(f.scenario, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, s := range scenarios.All {
				if f.prov == ProviderAzureEmulator && !slices.Contains(AzureScenarios, s.Name) {
					notRun = append(notRun, fmt.Sprintf("%s: does not run on emulated Azure", s.Name))
					continue
				}
				if f.prov == ProviderAWSEmulator && !slices.Contains(AWSScenarios, s.Name) {
					notRun = append(notRun, fmt.Sprintf("%s: does not run on emulated AWS", s.Name))
					continue
				}
				if err := scenarios.Runs(s.Name, f.haproxyKind()); err != nil {
					notRun = append(notRun, err.Error())
					continue
				}
				opts.Scenarios = append(opts.Scenarios, s.Name)
			}
			continue
		}
		if err := scenarios.Runs(name, f.haproxyKind()); err != nil {
			return nil, err
		}
		opts.Scenarios = append(opts.Scenarios, name)
	}
	return notRun, nil
}

// execute runs the lab with opts (on emulated Azure, once per point of the
// sweep: executeSweep), prints the table, writes the reports and ends with
// the verdict (notRun: what was asked for and is not run, with why); it
// returns the exit status.
func execute(ctx context.Context, opts scenarios.Options, points []azure.Options, notRun []string, jsonPath, htmlPath string, stdout, stderr io.Writer) int {
	start := time.Now()
	var results []report.Result
	var err error
	if len(points) > 0 {
		results, err = executeSweep(ctx, opts, points, stderr)
	} else {
		results, err = scenarios.Execute(ctx, opts)
	}
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		report.WriteTable(stdout, results, opts.Modes)
		writeAzureFigures(stdout, results)
		writeAWSFigures(stdout, results)
		report.WriteUpdateFigures(stdout, results)
		report.WriteOutsideFigures(stdout, results)
		report.WriteErrors(stderr, results)
		fmt.Fprintf(stdout, "\n%d runs in %s\n", len(results), time.Since(start).Round(100*time.Millisecond))
	}
	code := report.Finish(stderr, results, err, jsonPath)
	if htmlPath != "" && len(results) > 0 {
		if err := report.WriteHTML(htmlPath, results, opts.Modes); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			code = 1
			htmlPath = ""
		}
	} else {
		htmlPath = ""
	}
	if len(results) > 0 || len(notRun) > 0 {
		report.WriteVerdict(stdout, results, notRun, htmlPath)
	}
	return code
}

// parseModes parses --mode: "all", or modes separated by commas (nil when
// one is unknown), in the order given.
func parseModes(v string) []report.Mode {
	if v == "all" {
		return report.AllModes
	}
	var out []report.Mode
	for _, name := range strings.Split(v, ",") {
		m := report.Mode(strings.TrimSpace(name))
		if !slices.Contains(report.KnownModes, m) {
			return nil
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// oneOrBoth parses a flag that names a or b or "both".
func oneOrBoth(v, a, b string) ([]string, bool) {
	switch v {
	case a, b:
		return []string{v}, true
	case "both":
		return []string{a, b}, true
	}
	return nil, false
}

// defaultHTML is where the HAProxy lab writes its HTML report when --html
// is not given: under the repository's _output (ignored by git), the same
// path every run, so the newest report is always in one place.
const defaultHTML = "_output/lab/lab.html"

// html is the HTML report's path: --html, or defaultHTML in the
// repository; its directory is made (not on a dry run).
func (f flags) html() (string, error) {
	if f.htmlPath != "" {
		return f.htmlPath, nil
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("the HTML report's default place: %w (give --html FILE)", err)
	}
	path := filepath.Join(root, filepath.FromSlash(defaultHTML))
	if !f.dryRun {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", fmt.Errorf("the HTML report's directory: %w", err)
		}
	}
	return path, nil
}

// writePlan is --dry-run's answer: the runs the lab would make, in order,
// what it would not run and why, and where the reports would go.
func writePlan(w io.Writer, plan []scenarios.Planned, notRun []string, htmlPath, jsonPath string) {
	fmt.Fprintf(w, "zerodrop lab --dry-run: the flags are valid; the lab would make %d runs (scenario backend/policy mode), starting nothing now:\n", len(plan))
	for _, p := range plan {
		fmt.Fprintf(w, "  %s\n", p)
	}
	for _, n := range notRun {
		fmt.Fprintf(w, "not run: %s\n", n)
	}
	fmt.Fprintf(w, "HTML report: %s\n", htmlPath)
	if jsonPath != "" {
		fmt.Fprintf(w, "JSON report: %s\n", jsonPath)
	}
}

// writeWorld is --dry-run's line of the world a lab runs in and its
// options (the world's variant), where it says them; a sweep's (points) is
// the sweep's plan.
func writeWorld(w io.Writer, wd world.World, points int) {
	if points > 1 {
		fmt.Fprintf(w, "world: %s, options: each sweep point above\n", wd.Name())
	} else if v, ok := wd.(world.Variant); ok {
		fmt.Fprintf(w, "world: %s, options: %s\n", wd.Name(), v.Variant())
	}
}

// haproxyKind is the HAProxy world the flags choose.
func (f flags) haproxyKind() world.Kind {
	switch {
	case f.fromChart:
		return world.Chart
	case f.dataPlane != 0:
		return world.Replicas
	}
	return world.OneHAProxy
}

// haproxyWorld is the HAProxy world the flags choose, with its options.
func (f flags) haproxyWorld() world.World {
	switch f.haproxyKind() {
	case world.Chart:
		return chart.New(chart.Options{Replicas: f.dataPlane, Update: f.dataPlaneUpdate, HardStopAfter: f.hardStopAfter, GracePeriod: f.dataPlaneGrace,
			Router: dataplane.Router(f.router), UnbalancedTimer: f.unbalancedTimer})
	case world.Replicas:
		return replicas.New(replicas.Options{Replicas: f.dataPlane})
	}
	return haproxy.New(haproxy.Options{LoadBalancers: f.dataPlane})
}
