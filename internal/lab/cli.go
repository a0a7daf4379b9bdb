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
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/azurelab"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/upstream"
)

// Run is the `zerodrop lab` command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == scenarios.UpstreamCommand {
		// A controller pod of the upstream and recipe modes.
		return upstream.Main(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == azurelab.AzureCommand {
		// A controller process of the emulator lab's kill-mid-plan.
		return azurelab.AzureControllerMain(args[1:], stderr)
	}
	f, code, ok := parseFlags(args, stderr)
	if !ok {
		return code
	}
	switch f.prov {
	case "haproxy":
	case azurelab.ProviderAzureEmulator:
		return azurelab.RunAzureCommand(ctx, azurelab.CommandFlags{Scenario: f.scenario, Mode: f.mode, FaultRate: f.faultRate,
			Kills: f.chaos.MidPlanKills, CCMLoadBalancers: f.ccmLBs, JSONPath: f.jsonPath, HTMLPath: f.htmlPath}, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "zerodrop lab: unknown provider %q (haproxy, %s)\n", f.prov, azurelab.ProviderAzureEmulator)
		return 2
	}
	opts, ok := f.options(stderr)
	if !ok {
		return 2
	}
	return execute(ctx, opts, f.jsonPath, f.htmlPath, stdout, stderr)
}

// flags are `zerodrop lab`'s command line, parsed.
type flags struct {
	scenario, mode, backend, policy, jsonPath, htmlPath, dir, appSigterm, prov string
	keep, fromChart                                                            bool
	rate, dataPlane                                                            int
	faultRate                                                                  float64
	ccmLBs                                                                     string
	recipe                                                                     scenarios.Recipe
	chaos                                                                      scenarios.ChaosOptions
}

// parseFlags parses args; ok false: exit with code (0 for -help, 2 for a
// usage error, already reported on stderr).
func parseFlags(args []string, stderr io.Writer) (f flags, code int, ok bool) {
	fs := flag.NewFlagSet("zerodrop lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "rollout", "comma-separated: rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down, lb-replica-restart (with --data-plane-replicas), or all")
	mode := fs.String("mode", "all", "comma-separated: upstream,recipe,zerodrop, or all (with --provider azure-emulator: upstream,zerodrop; upstream is the real cloud-provider-azure)")
	backend := fs.String("backend", scenarios.BackendIP, "ip|node|both: the load balancer sends to pod IPs, or to node IP:nodePort through kube-proxy")
	policy := fs.String("traffic-policy", scenarios.PolicyCluster, "cluster|local|both: the Service's externalTrafficPolicy")
	jsonPath := fs.String("json", "", "write the JSON report to `FILE`")
	htmlPath := fs.String("html", "", "write an HTML report with timelines to `FILE`")
	keep := fs.Bool("keep", false, "keep the work directory (logs of every process) and print its path")
	dir := fs.String("dir", "", "work directory (default: a new temporary one); kept")
	rate := fs.Int("rate", traffic.DefaultRate, "open-loop requests per `second` (each on a fresh connection)")
	recipe := scenarios.DefaultRecipe
	fs.DurationVar(&recipe.PreStopSleep, "recipe-prestop-sleep", scenarios.DefaultRecipe.PreStopSleep, "recipe mode: the pods' preStop sleep")
	fs.DurationVar(&recipe.GracePeriod, "recipe-grace-period", scenarios.DefaultRecipe.GracePeriod, "recipe mode: terminationGracePeriodSeconds")
	fs.DurationVar(&recipe.MinReady, "recipe-min-ready", scenarios.DefaultRecipe.MinReady, "recipe mode: the Deployment's minReadySeconds")
	var chaos scenarios.ChaosOptions
	fs.IntVar(&chaos.MidPlanKills, "kills", report.DefaultMidPlanKills, "kill-mid-plan: how often to SIGKILL the writer at a plan's first write")
	fs.DurationVar(&chaos.APIServerOutage, "apiserver-outage", report.DefaultAPIServerOutage, "apiserver-down: how long kube-apiserver stays stopped")
	appSigterm := fs.String("app-sigterm", traffic.AppSigtermGraceful, "graceful|exit: the workload's SIGTERM handling — a graceful shutdown, or none (exit at once, every connection closed without a word)")
	faultRate := fs.Float64("azure-fault-rate", 0, "with --provider "+azurelab.ProviderAzureEmulator+": the share of ARM requests that fail (412, 429, 500, slow) once set up, e.g. 0.2")
	ccmLBs := fs.String("azure-ccm-lbs", azurelab.CCMSingleLB, "with --provider "+azurelab.ProviderAzureEmulator+": upstream's cloud-provider-azure with one Standard load balancer ("+azurelab.CCMSingleLB+") or "+azurelab.CCMMultipleLBs+" (multipleStandardLoadBalancerConfigurations: two, nodes placed by availability set)")
	fromChart := fs.Bool("from-chart", false, "zerodrop mode: install zerodrop from the repository's chart (helm template, applied per run; the data plane a DaemonSet on the load-balancer hosts), with --data-plane-replicas")
	dataPlane := fs.Int("data-plane-replicas", 0, "zerodrop mode: an HAProxy data plane of `N` replicas (2 to 4), each written only by its own zerodrop process (--role=data-plane), the controllers in --role=control, the client routed to all by a resilient nexthop group; 0: one HAProxy written by the leader")
	prov := fs.String("provider", "haproxy", "haproxy|"+azurelab.ProviderAzureEmulator+" (azure-emulator: its own scenarios, restart, churn, kill-mid-plan and restart-idle, see docs/azure.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: zerodrop lab [--scenario rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down,lb-replica-restart|all] [--mode upstream,recipe,zerodrop|all] [--backend ip|node|both] [--traffic-policy cluster|local|both] [--provider haproxy|azure-emulator] [--rate N] [--json FILE] [--html FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flags{}, 0, false
		}
		return flags{}, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop lab: unexpected arguments %v\n", fs.Args())
		return flags{}, 2, false
	}
	if chaos.MidPlanKills < 1 || chaos.APIServerOutage < time.Second {
		fmt.Fprintln(stderr, "zerodrop lab: --kills must be at least 1 and --apiserver-outage at least 1s")
		return flags{}, 2, false
	}
	return flags{scenario: *scenario, mode: *mode, backend: *backend, policy: *policy, jsonPath: *jsonPath, htmlPath: *htmlPath,
		keep: *keep, dir: *dir, rate: *rate, recipe: recipe, chaos: chaos, appSigterm: *appSigterm, faultRate: *faultRate, ccmLBs: *ccmLBs,
		fromChart: *fromChart, dataPlane: *dataPlane, prov: *prov}, 0, true
}

// options checks the flags of the HAProxy lab and turns them into the
// scenarios' Options; false: a usage error, reported on stderr.
func (f flags) options(stderr io.Writer) (scenarios.Options, bool) {
	if f.rate <= 0 || f.rate > 2000 {
		fmt.Fprintf(stderr, "zerodrop lab: --rate %d: want 1 to 2000 requests per second\n", f.rate)
		return scenarios.Options{}, false
	}
	for _, d := range []time.Duration{f.recipe.PreStopSleep, f.recipe.GracePeriod, f.recipe.MinReady} {
		if d < 0 || d%time.Second != 0 {
			fmt.Fprintf(stderr, "zerodrop lab: recipe durations are whole seconds, not %s\n", d)
			return scenarios.Options{}, false
		}
	}
	if f.dataPlane != 0 && (f.dataPlane < 2 || f.dataPlane > scenarios.MaxDataPlaneReplicas) {
		fmt.Fprintf(stderr, "zerodrop lab: --data-plane-replicas %d: want 0, or 2 to %d\n", f.dataPlane, scenarios.MaxDataPlaneReplicas)
		return scenarios.Options{}, false
	}
	if f.fromChart && f.dataPlane == 0 {
		fmt.Fprintf(stderr, "zerodrop lab: --from-chart installs the chart's HAProxy data plane: give --data-plane-replicas 2 to %d\n", scenarios.MaxDataPlaneReplicas)
		return scenarios.Options{}, false
	}
	opts := scenarios.Options{KeepDir: f.keep, Dir: f.dir, Progress: stderr, Rate: f.rate, Recipe: f.recipe, Chaos: f.chaos, DataPlaneReplicas: f.dataPlane,
		FromChart: f.fromChart}
	switch f.appSigterm {
	case traffic.AppSigtermGraceful:
	case traffic.AppSigtermExit:
		opts.AppExitOnSIGTERM = true
	default:
		fmt.Fprintf(stderr, "zerodrop lab: --app-sigterm %q: want %s or %s\n", f.appSigterm, traffic.AppSigtermGraceful, traffic.AppSigtermExit)
		return scenarios.Options{}, false
	}
	if !f.addScenarios(&opts, stderr) {
		return scenarios.Options{}, false
	}
	if opts.Modes = parseModes(f.mode); opts.Modes == nil {
		fmt.Fprintf(stderr, "zerodrop lab: --mode %q: want upstream, recipe, zerodrop (comma-separated) or all\n", f.mode)
		return scenarios.Options{}, false
	}
	var ok bool
	if opts.Backends, ok = oneOrBoth(f.backend, scenarios.BackendIP, scenarios.BackendNode); !ok {
		fmt.Fprintf(stderr, "zerodrop lab: --backend %q: want ip, node or both\n", f.backend)
		return scenarios.Options{}, false
	}
	if opts.TrafficPolicies, ok = oneOrBoth(f.policy, scenarios.PolicyCluster, scenarios.PolicyLocal); !ok {
		fmt.Fprintf(stderr, "zerodrop lab: --traffic-policy %q: want cluster, local or both\n", f.policy)
		return scenarios.Options{}, false
	}
	return opts, true
}

// addScenarios adds the scenarios --scenario names to opts ("all": every
// scenario that runs with the data plane and install asked for).
func (f flags) addScenarios(opts *scenarios.Options, stderr io.Writer) bool {
	for _, name := range strings.Split(f.scenario, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, s := range scenarios.All {
				if scenarios.DataPlaneRuns(s.Name, f.dataPlane) == nil && scenarios.ChartRuns(s.Name, f.fromChart) == nil {
					opts.Scenarios = append(opts.Scenarios, s.Name)
				}
			}
			continue
		}
		if _, ok := scenarios.ScenarioNamed(name); !ok {
			fmt.Fprintf(stderr, "zerodrop lab: unknown scenario %q\n", name)
			return false
		}
		if err := errors.Join(scenarios.DataPlaneRuns(name, f.dataPlane), scenarios.ChartRuns(name, f.fromChart)); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return false
		}
		opts.Scenarios = append(opts.Scenarios, name)
	}
	return true
}

// execute runs the lab with opts, prints the table and writes the reports;
// it returns the exit status.
func execute(ctx context.Context, opts scenarios.Options, jsonPath, htmlPath string, stdout, stderr io.Writer) int {
	start := time.Now()
	results, err := scenarios.Execute(ctx, opts)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		report.WriteTable(stdout, results, opts.Modes)
		report.WriteErrors(stderr, results)
		fmt.Fprintf(stdout, "\n%d runs in %s\n", len(results), report.FormatDuration(time.Since(start)))
	}
	code := report.Finish(stderr, results, err, jsonPath)
	if htmlPath != "" {
		if err := report.WriteHTML(htmlPath, results, opts.Modes); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			code = 1
		}
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
		if !slices.Contains(report.AllModes, m) {
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
