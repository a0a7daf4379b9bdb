// Package lab is `zerodrop lab`: real rollouts under real traffic, the real
// upstream service controller (with a typical workload, and with the
// published recipe) and zerodrop side by side. It starts a real
// kube-apiserver + etcd + kube-controller-manager, nodes and pods in network
// namespaces with the real kube-proxy, a node agent that runs each pod
// (probes, preStop hooks, SIGTERM, grace period), a real HAProxy per run
// driven by controller processes (`zerodrop controller`, or the upstream
// controller's cloud-controller-manager), and bounded traffic: requests and
// WebSockets. See docs/lab.md.
package lab

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/lab/upstream"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Options configure a lab run.
type Options struct {
	// Scenarios to run, in order (names from the scenario list).
	Scenarios []string
	// Modes to run each scenario in, in order.
	Modes []Mode
	// Backends ("ip", "node") and TrafficPolicies ("cluster", "local") to
	// run each scenario with; default ip and cluster.
	Backends        []string
	TrafficPolicies []string
	// Executable is the zerodrop binary the controllers run as
	// (`<Executable> controller …`); default os.Executable().
	Executable string
	// Dir is the work directory (default: a new temporary directory,
	// removed at the end unless KeepDir).
	Dir     string
	KeepDir bool
	// Progress receives progress lines (default io.Discard).
	Progress io.Writer
	// Rate is the open-loop request rate per second (default 200).
	Rate int
	// Recipe is the recipe mode's workload (default DefaultRecipe).
	Recipe Recipe
	// Chaos tunes the chaos scenarios (kill-mid-plan, apiserver-down).
	Chaos ChaosOptions
	// AppExitOnSIGTERM makes the workload an app without SIGTERM handling:
	// it exits at SIGTERM and every connection it holds is closed as a
	// process exit closes it (podServer.exit; the default is a graceful
	// shutdown, podServer.shutdown).
	AppExitOnSIGTERM bool
	// DataPlaneReplicas, when 2 or more, gives zerodrop mode an HAProxy data
	// plane of that many replicas (dataplane.go); 0: one HAProxy written by
	// the controllers' leader.
	DataPlaneReplicas int
	// FromChart installs zerodrop mode's zerodrop from the chart (chart.go);
	// it needs DataPlaneReplicas.
	FromChart bool
}

// lab is the running lab: control plane, node agent, drain Service and
// webhook, shared by every scenario; each scenario brings its own namespace,
// HAProxy and controllers.
type lab struct {
	opts  Options
	dir   string
	start time.Time
	cp    *controlPlane
	net   *network
	agent *agent
	hook  *webhookServer
	// egress is the API server's path to Service-referenced webhooks
	// (egress.go).
	egress *egressProxy
	runs   int

	curMu   sync.Mutex
	current *run           // the run under way, for the agent's onStop
	hooks   map[string]int // per namespace: preStop hooks that failed

	agentStop context.CancelFunc

	logMu      sync.Mutex
	logFile    *os.File
	progressMu sync.Mutex
}

// Run is the `zerodrop lab` command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == upstreamCommand {
		// A controller pod of the upstream and recipe modes.
		return upstream.Main(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == azureCommand {
		// A controller process of the emulator lab's kill-mid-plan.
		return azureControllerMain(args[1:], stderr)
	}
	fs := flag.NewFlagSet("zerodrop lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "rollout", "comma-separated: rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down, lb-replica-restart (with --data-plane-replicas), or all")
	mode := fs.String("mode", "all", "comma-separated: upstream,recipe,zerodrop, or all (with --provider azure-emulator: upstream-like,zerodrop)")
	backend := fs.String("backend", BackendIP, "ip|node|both: the load balancer sends to pod IPs, or to node IP:nodePort through kube-proxy")
	policy := fs.String("traffic-policy", PolicyCluster, "cluster|local|both: the Service's externalTrafficPolicy")
	jsonPath := fs.String("json", "", "write the JSON report to `FILE`")
	htmlPath := fs.String("html", "", "write an HTML report with timelines to `FILE`")
	keep := fs.Bool("keep", false, "keep the work directory (logs of every process) and print its path")
	dir := fs.String("dir", "", "work directory (default: a new temporary one); kept")
	rate := fs.Int("rate", defaultRate, "open-loop requests per `second` (each on a fresh connection)")
	recipe := DefaultRecipe
	fs.DurationVar(&recipe.PreStopSleep, "recipe-prestop-sleep", DefaultRecipe.PreStopSleep, "recipe mode: the pods' preStop sleep")
	fs.DurationVar(&recipe.GracePeriod, "recipe-grace-period", DefaultRecipe.GracePeriod, "recipe mode: terminationGracePeriodSeconds")
	fs.DurationVar(&recipe.MinReady, "recipe-min-ready", DefaultRecipe.MinReady, "recipe mode: the Deployment's minReadySeconds")
	var chaos ChaosOptions
	fs.IntVar(&chaos.MidPlanKills, "kills", DefaultMidPlanKills, "kill-mid-plan: how often to SIGKILL the writer at a plan's first write")
	fs.DurationVar(&chaos.APIServerOutage, "apiserver-outage", DefaultAPIServerOutage, "apiserver-down: how long kube-apiserver stays stopped")
	appSigterm := fs.String("app-sigterm", appSigtermGraceful, "graceful|exit: the workload's SIGTERM handling — a graceful shutdown, or none (exit at once, every connection closed without a word)")
	faultRate := fs.Float64("azure-fault-rate", 0, "with --provider "+ProviderAzureEmulator+": the share of ARM requests that fail (412, 429, 500, slow) once set up, e.g. 0.2")
	fromChart := fs.Bool("from-chart", false, "zerodrop mode: install zerodrop from the repository's chart (helm template, applied per run; the data plane a DaemonSet on the load-balancer hosts), with --data-plane-replicas")
	dataPlane := fs.Int("data-plane-replicas", 0, "zerodrop mode: an HAProxy data plane of `N` replicas (2 to 4), each written only by its own zerodrop process (--role=data-plane), the controllers in --role=control, the client routed to all by a resilient nexthop group; 0: one HAProxy written by the leader")
	prov := fs.String("provider", "haproxy", "haproxy|"+ProviderAzureEmulator+" (azure-emulator: its own scenarios, restart, churn and kill-mid-plan, see docs/azure.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: zerodrop lab [--scenario rollout,rollout-local,restart-idle,restart,scale-down,drain-node,churn,kill-mid-plan,apiserver-down,lb-replica-restart|all] [--mode upstream,recipe,zerodrop|all] [--backend ip|node|both] [--traffic-policy cluster|local|both] [--provider haproxy|azure-emulator] [--rate N] [--json FILE] [--html FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop lab: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if chaos.MidPlanKills < 1 || chaos.APIServerOutage < time.Second {
		fmt.Fprintln(stderr, "zerodrop lab: --kills must be at least 1 and --apiserver-outage at least 1s")
		return 2
	}
	switch *prov {
	case "haproxy":
	case ProviderAzureEmulator:
		return runAzureCommand(ctx, *scenario, *mode, *faultRate, chaos.MidPlanKills, *jsonPath, *htmlPath, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "zerodrop lab: unknown provider %q (haproxy, %s)\n", *prov, ProviderAzureEmulator)
		return 2
	}
	if *rate <= 0 || *rate > 2000 {
		fmt.Fprintf(stderr, "zerodrop lab: --rate %d: want 1 to 2000 requests per second\n", *rate)
		return 2
	}
	for _, d := range []time.Duration{recipe.PreStopSleep, recipe.GracePeriod, recipe.MinReady} {
		if d < 0 || d%time.Second != 0 {
			fmt.Fprintf(stderr, "zerodrop lab: recipe durations are whole seconds, not %s\n", d)
			return 2
		}
	}
	if *dataPlane != 0 && (*dataPlane < 2 || *dataPlane > maxDataPlaneReplicas) {
		fmt.Fprintf(stderr, "zerodrop lab: --data-plane-replicas %d: want 0, or 2 to %d\n", *dataPlane, maxDataPlaneReplicas)
		return 2
	}
	if *fromChart && *dataPlane == 0 {
		fmt.Fprintf(stderr, "zerodrop lab: --from-chart installs the chart's HAProxy data plane: give --data-plane-replicas 2 to %d\n", maxDataPlaneReplicas)
		return 2
	}
	opts := Options{KeepDir: *keep, Dir: *dir, Progress: stderr, Rate: *rate, Recipe: recipe, Chaos: chaos, DataPlaneReplicas: *dataPlane,
		FromChart: *fromChart}
	switch *appSigterm {
	case appSigtermGraceful:
	case appSigtermExit:
		opts.AppExitOnSIGTERM = true
	default:
		fmt.Fprintf(stderr, "zerodrop lab: --app-sigterm %q: want %s or %s\n", *appSigterm, appSigtermGraceful, appSigtermExit)
		return 2
	}
	for _, name := range strings.Split(*scenario, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, s := range scenarios {
				if dataPlaneRuns(s.name, *dataPlane) == nil && chartRuns(s.name, *fromChart) == nil {
					opts.Scenarios = append(opts.Scenarios, s.name)
				}
			}
			continue
		}
		if _, ok := scenarioNamed(name); !ok {
			fmt.Fprintf(stderr, "zerodrop lab: unknown scenario %q\n", name)
			return 2
		}
		if err := errors.Join(dataPlaneRuns(name, *dataPlane), chartRuns(name, *fromChart)); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return 2
		}
		opts.Scenarios = append(opts.Scenarios, name)
	}
	if opts.Modes = parseModes(*mode); opts.Modes == nil {
		fmt.Fprintf(stderr, "zerodrop lab: --mode %q: want upstream, recipe, zerodrop (comma-separated) or all\n", *mode)
		return 2
	}
	var ok bool
	if opts.Backends, ok = oneOrBoth(*backend, BackendIP, BackendNode); !ok {
		fmt.Fprintf(stderr, "zerodrop lab: --backend %q: want ip, node or both\n", *backend)
		return 2
	}
	if opts.TrafficPolicies, ok = oneOrBoth(*policy, PolicyCluster, PolicyLocal); !ok {
		fmt.Fprintf(stderr, "zerodrop lab: --traffic-policy %q: want cluster, local or both\n", *policy)
		return 2
	}
	start := time.Now()
	results, err := Execute(ctx, opts)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		writeTable(stdout, results, opts.Modes)
		writeErrors(stderr, results)
		fmt.Fprintf(stdout, "\n%d runs in %s\n", len(results), formatDuration(time.Since(start)))
	}
	code := 0
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
		code = 1
	}
	for _, r := range results {
		if r.err != nil {
			code = 1
		}
	}
	if *jsonPath != "" {
		if err := writeJSON(*jsonPath, Report{Scenarios: results}); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			code = 1
		}
	}
	if *htmlPath != "" {
		if err := writeHTML(*htmlPath, results, opts.Modes); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			code = 1
		}
	}
	return code
}

// Execute runs the lab and returns a result per scenario and mode run (also
// when interrupted: the runs so far). Everything it started is stopped and
// its work directory removed before it returns.
func Execute(ctx context.Context, opts Options) (results []Result, err error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Rate <= 0 {
		opts.Rate = defaultRate
	}
	if opts.Recipe == (Recipe{}) {
		opts.Recipe = DefaultRecipe
	}
	if opts.Executable == "" {
		if opts.Executable, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	var scs []scenario
	for _, name := range opts.Scenarios {
		sc, ok := scenarioNamed(name)
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q", name)
		}
		scs = append(scs, sc)
	}
	// The webhook's admission code logs through controller-runtime.
	ctrllog.SetLogger(logr.Discard())
	l := &lab{opts: opts, dir: opts.Dir, start: time.Now()}
	if l.dir == "" {
		if l.dir, err = os.MkdirTemp("", "zerodrop-lab-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if l.logFile != nil {
			l.logFile.Close()
		}
		if opts.KeepDir {
			fmt.Fprintf(opts.Progress, "lab: work directory kept: %s\n", l.dir)
		} else if opts.Dir == "" {
			_ = os.RemoveAll(l.dir)
		}
	}()
	if l.logFile, err = os.Create(filepath.Join(l.dir, "lab.log")); err != nil {
		return nil, err
	}
	// klog's output (the upstream service controller, client-go) goes to
	// the lab's log, not among the progress lines (errors still reach
	// stderr). SetOutput and LogToStderr take klog's lock, unlike
	// SetLogger, so goroutines of an earlier lab in the same process may
	// still log.
	klog.LogToStderr(false)
	klog.SetOutput(klogWriter{l})
	defer func() {
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	}()
	if err := l.startShared(ctx); err != nil {
		return nil, err
	}
	defer l.stopShared()
	if len(opts.Backends) == 0 {
		opts.Backends = []string{BackendIP}
	}
	if len(opts.TrafficPolicies) == 0 {
		opts.TrafficPolicies = []string{PolicyCluster}
	}
	var variants []variant
	for _, b := range opts.Backends {
		for _, p := range opts.TrafficPolicies {
			variants = append(variants, variant{b, p})
		}
	}
	seenNode := map[string]bool{}
	for _, sc := range scs {
		for _, v := range scenarioVariants(sc, variants) {
			for _, mode := range opts.Modes {
				v := v
				if sc.modes != nil && !slices.Contains(sc.modes, mode) {
					continue
				}
				if mode.nodeBacked() {
					// The upstream controller is node-backed by nature
					// (--backend is zerodrop's): it runs once per traffic
					// policy, in the first variant of that policy. Nothing
					// changes in restart-idle but the controller, which the
					// recipe leaves as upstream has it: that runs once, as
					// upstream.
					k := string(mode) + "/" + sc.name + "/" + v.policy
					if seenNode[k] || mode == ModeRecipe && sc.name == scenarioRestartIdle {
						continue
					}
					seenNode[k] = true
					v = variant{BackendNode, v.policy}
				}
				res, err := l.runScenario(ctx, sc, v, mode)
				res.err = err
				results = append(results, res)
				if err != nil {
					l.progressf("%-10s %-13s %-8s error: %v", sc.name, v, mode, err)
				} else {
					l.progressf("%-10s %-13s %-8s done: %d requests, %d failed (%d late, %d by a client stall); %d long conns, %d closed, %d broken; %d writes, %d conflicts; %d hook failures, %d drain relay retries; %.1fs%s",
						sc.name, v, mode, res.Requests, res.FailedRequests, res.RequestsLate, res.RequestsLateStall, res.LongConns, res.LongConnsClosed, res.LongConnsBroken,
						res.ProviderWrites, res.ProviderConflicts, res.HookFailures, res.DrainRelayRetries, res.DurationSeconds, kinds(res.timeline))
				}
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	return results, nil
}

// variant is a run's backend and traffic policy.
type variant struct{ backend, policy string }

func (v variant) String() string { return v.backend + "/" + v.policy }

// parseModes parses --mode: "all", or modes separated by commas (nil when
// one is unknown), in the order given.
func parseModes(v string) []Mode {
	if v == "all" {
		return AllModes
	}
	var out []Mode
	for _, name := range strings.Split(v, ",") {
		m := Mode(strings.TrimSpace(name))
		if !slices.Contains(AllModes, m) {
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

// labNodes is the number of lab nodes.
const labNodes = 3

// hookFailures is the number of preStop hooks of namespace ns that failed.
func (l *lab) hookFailures(ns string) int64 {
	l.curMu.Lock()
	defer l.curMu.Unlock()
	return int64(l.hooks[ns])
}

// relayRetries counts the failed attempts the drain relays of namespace
// ns's pods made again, from their logs (pods_sidecar.go names them).
func (l *lab) relayRetries(ns string) int64 {
	files, _ := filepath.Glob(filepath.Join(l.dir, ns+"_*_"+webhook.RelayContainer+".log"))
	var n int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			l.logf("drain relay log %s: %v", f, err)
			continue
		}
		n += int64(bytes.Count(b, []byte(`"msg":"`+drainrelay.MsgRetry+`"`)))
	}
	return n
}

// klogWriter writes klog's lines into the lab's log.
type klogWriter struct{ l *lab }

func (w klogWriter) Write(p []byte) (int, error) {
	w.l.logf("klog %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *lab) logf(format string, args ...any) {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	if l.logFile != nil {
		fmt.Fprintf(l.logFile, "%8.3f %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// progressf logs a line and prints it to Progress; lines from concurrent
// callers (a run's progress ticker and its end) are written one at a time.
func (l *lab) progressf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.logf("%s", msg)
	el := time.Since(l.start).Round(time.Second)
	l.progressMu.Lock()
	defer l.progressMu.Unlock()
	fmt.Fprintf(l.opts.Progress, "[%5s] %s\n", el, strings.TrimSpace(msg))
}

func clientFor(cfg *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) }
