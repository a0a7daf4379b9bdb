package azurewrites

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// `zerodrop lab --provider azure-emulator`: the restart, churn and
// kill-mid-plan scenarios on the ARM emulator instead of HAProxy. Traffic
// through an emulated load balancer means nothing, so the lab counts what
// reaches Azure instead, from the emulator's record of every call: PUTs and
// DELETEs, those that changed something, 412s, conflicts the controllers
// re-planned silently and those they surfaced as Warning Events, and the
// time until the load balancers hold what the Services ask for. Every
// writer reaches the emulator over HTTPS (process.go): zerodrop's
// controllers in the lab process (a restart stops one manager and starts
// another; instance.go), kill-mid-plan's as processes of their own, and
// upstream, the real cloud-controller-manager of cloud-provider-azure
// (upstream.go), on a real kube-apiserver + etcd.

// ProviderAzureEmulator is the --provider value.
const ProviderAzureEmulator = "azure-emulator"

// AzureScenarios are the scenarios the emulator lab runs, from the lab's
// one table of where each scenario runs (scenarios.Table). Upstream (the
// real cloud-controller-manager) runs restart, restart-idle and churn;
// kill-mid-plan kills zerodrop's writer, and shared-lb runs both writers at
// once.
var AzureScenarios = scenarios.NamesIn(world.AzureWrites)

// upstreamRuns reports whether upstream (the real CCM) runs scenario.
func upstreamRuns(scenario string) bool {
	return scenarios.RunsIn(scenario, world.AzureWrites, report.ModeUpstream)
}

// ccmResources are the lab's Azure resources, as its CCMs' cloud config
// names them.
var ccmResources = ccm.Resources{SubscriptionID: azureSub, ResourceGroup: azureGroup, Location: "westeurope",
	VNet: azureVNet, Subnet: azureSubnetName, SecurityGroup: azureNSG}

// Modes are the modes the emulator lab runs.
var Modes = []report.Mode{report.ModeUpstream, report.ModeZerodrop}

const (
	azureSub                             = "00000000-0000-0000-0000-00000000aa01"
	azureGroup                           = "rg-zerodrop-lab"
	azureVNet, azureSubnetName, azureNSG = "vnet-lab", "frontends", "nsg-lab"
	azureSubnet                          = "/subscriptions/" + azureSub + "/resourceGroups/" + azureGroup +
		"/providers/Microsoft.Network/virtualNetworks/" + azureVNet + "/subnets/" + azureSubnetName
	// azureIdle is how long no reconcile may run for a run to count as settled.
	azureIdle = 500 * time.Millisecond
	// azureTimeout is the least bound of a wait for convergence (see
	// waitLimit). It only catches a controller that never converges: on a
	// loaded machine the lab is to run slower, not to fail.
	azureTimeout = 5 * time.Minute
	// The leader election's lease, renew deadline and retry period: a renewal
	// may take as long as it does on a loaded machine (a leader that misses
	// its renew deadline stops), while a released lease, as on every
	// restart, is taken within a retry period.
	azureLease, azureRenew, azureRetryPeriod = 30 * time.Second, 20 * time.Second, 250 * time.Millisecond
)

var azureLBNames = []string{"lb-a", "lb-b"}

// AzureOptions configure ExecuteAzure.
type AzureOptions struct {
	Scenarios []string
	Modes     []report.Mode
	// Restarts is how often restart stops the writer (default
	// scenarios.DefaultRestarts, as in every world).
	Restarts int
	// Services share the two load balancers (default 10); restart-idle has
	// IdleServices (default 30) and stops the writer IdleRestarts times
	// (default scenarios.DefaultIdleRestarts, as in every world); churn
	// starts with ChurnServices (default 30).
	Services, IdleServices, IdleRestarts, ChurnServices int
	// ChurnDuration is how long the churn changes things (default 4s).
	ChurnDuration time.Duration
	// FaultRate is the share of ARM requests (polls aside) the emulator
	// fails once a run's setup is done: 412s, 429s, 500s and slow answers
	// in equal shares, none twice in a row on one load balancer.
	FaultRate float64
	// Kills is how often kill-mid-plan stops the writer (default
	// report.DefaultMidPlanKills).
	Kills int
	// Executable is the zerodrop binary kill-mid-plan's controller
	// processes run as (`<Executable> lab azure-controller …`); default
	// os.Executable().
	Executable string
	// CCMLoadBalancers is upstream's load-balancer layout: CCMSingleLB
	// (default) or CCMMultipleLBs.
	CCMLoadBalancers string
	// IdleChange is what restart-idle changes while the writer is down
	// (IdleChanges; default IdleChangeNone).
	IdleChange string
	// CCMBinary is cloud-provider-azure's cloud-controller-manager (default:
	// built or taken from the cache by hack/cloud-provider-azure.sh).
	CCMBinary string
	Progress  io.Writer
}

// ExecuteAzure runs the scenarios in each mode, each run on a fresh emulator
// and namespace, and returns a result per run (the runs so far on error).
func ExecuteAzure(ctx context.Context, opts AzureOptions) (results []report.Result, err error) {
	if opts, err = withAzureDefaults(opts); err != nil {
		return nil, err
	}
	upstream := slices.Contains(opts.Modes, report.ModeUpstream) && slices.ContainsFunc(opts.Scenarios, upstreamRuns)
	shared := slices.Contains(opts.Modes, report.ModeZerodrop) && slices.Contains(opts.Scenarios, ScenarioSharedLB)
	if (upstream || shared) && opts.CCMBinary == "" {
		fmt.Fprintln(opts.Progress, "cloud-provider-azure's cloud-controller-manager: from the cache, or built (minutes) on first use")
		if opts.CCMBinary, err = ccm.Binary(); err != nil {
			return nil, err
		}
	}
	for _, s := range opts.Scenarios {
		if !slices.Contains(AzureScenarios, s) {
			return nil, fmt.Errorf("scenario %q does not run on the Azure emulator (%v)", s, AzureScenarios)
		}
	}
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(opts.Progress, "[%5s] %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	progress("starting kube-apiserver and etcd")
	env, err := controlplane.Run()
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	// The nodes: the CCM's pools and zerodrop's node-backed Services
	// (restart-idle, churn) hold them.
	if err := ensureNodes(ctx, c); err != nil {
		return nil, err
	}
	n := 0
	for _, sc := range opts.Scenarios {
		for _, mode := range opts.Modes {
			if !upstreamRuns(sc) && mode == report.ModeUpstream {
				if sc != ScenarioSharedLB {
					progress("%-8s %-8s skipped: upstream (cloud-provider-azure) runs restart, restart-idle and churn only", sc, mode)
				}
				continue // shared-lb runs once, zerodrop with the CCM beside
			}
			n++
			r := &azureRun{cfg: env.Config, c: c, mode: mode, opts: opts, progress: progress,
				ns: fmt.Sprintf("azure-%d-%s-%s", n, sc, mode), emu: newLabEmulator(n, opts.CCMLoadBalancers)}
			results = append(results, r.runAndReport(ctx, sc))
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
		}
	}
	return results, nil
}

// newLabEmulator is a run's emulator with the cluster's network, security
// group and (multiple load balancers) the nodes' virtual machines.
func newLabEmulator(seed int, ccmLBs string) *azurearm.Emulator {
	emu := azurearm.New(azurearm.Options{Seed: uint64(seed)})
	emu.SeedSubnet(azureSub, azureGroup, azureVNet, azureSubnetName, netip.MustParsePrefix("127.240.0.0/16"))
	emu.SeedSecurityGroup(azureSub, azureGroup, azureNSG)
	if ccmLBs == CCMMultipleLBs {
		for _, n := range labNodes {
			emu.SeedVirtualMachine(azureSub, azureGroup, n.name, n.availabilitySet)
		}
	}
	return emu
}

// runAndReport runs the scenario and prints its progress line.
func (r *azureRun) runAndReport(ctx context.Context, sc string) report.Result {
	res, err := r.runIn(ctx, sc)
	res.Err = err
	if err != nil {
		r.progress("%-8s %-8s error: %v", sc, r.mode, err)
		return res
	}
	a := res.Azure
	r.progress("%-8s %-8s done: %d writes (%d load balancer PUTs, %d pool PUTs; %d changed something), %d 412s, %d conflicts retried, %d surfaced; %d faults injected, %d Warning Events; converged in %.1fs",
		sc, r.mode, res.ProviderWrites, a.LBPuts, a.PoolPuts, a.WritesChanged, a.PreconditionFailed, a.ConflictsRetried, a.ConflictsSurfaced,
		a.Faults, a.WarningEvents, a.ConvergeSeconds)
	return res
}

// withAzureDefaults fills in the options left zero; the executable only
// when a scenario with zerodrop controller processes runs (asProcesses).
func withAzureDefaults(opts AzureOptions) (AzureOptions, error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Services <= 0 {
		opts.Services = 10
	}
	if opts.ChurnDuration <= 0 {
		opts.ChurnDuration = 4 * time.Second
	}
	if opts.Kills <= 0 {
		opts.Kills = report.DefaultMidPlanKills
	}
	if opts.CCMLoadBalancers == "" {
		opts.CCMLoadBalancers = CCMSingleLB
	}
	if opts.IdleServices <= 0 {
		opts.IdleServices = idleServices
	}
	if opts.Restarts <= 0 {
		opts.Restarts = scenarios.DefaultRestarts
	}
	if opts.IdleRestarts <= 0 {
		// One default for every world's restart-idle.
		opts.IdleRestarts = scenarios.DefaultIdleRestarts
	}
	if opts.ChurnServices <= 0 {
		opts.ChurnServices = churnServices
	}
	if opts.IdleChange == "" {
		opts.IdleChange = IdleChangeNone
	}
	if !slices.Contains(IdleChanges, opts.IdleChange) {
		return opts, fmt.Errorf("idle change %q: want one of %v", opts.IdleChange, IdleChanges)
	}
	processes := slices.ContainsFunc(opts.Scenarios, asProcesses)
	if opts.Executable == "" && processes {
		var err error
		if opts.Executable, err = os.Executable(); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// azureRun is one scenario in one mode.
type azureRun struct {
	cfg       *rest.Config
	c         client.Client
	emu       *azurearm.Emulator
	ns        string
	mode      report.Mode
	opts      AzureOptions
	progress  func(string, ...any)
	svcs      []*azureSvc
	instances []*azureInstance
	// procs, when set, runs the controllers as processes (kill-mid-plan:
	// azure_process.go); countErr is a failure to count their Events.
	procs    *azureProcs
	countErr error
	ccms     []*ccmInstance // upstream's processes
	ccmSeq   int            // CCMs started, to name the next
	ccmSvcs  []*azureSvc    // shared-lb: the CCM's Services (svcs are zerodrop's)
	joined   []string       // restart-idle: the nodes it added (removeJoined)
	// zdLBs are the load balancers zerodrop may write (default azureLBNames).
	zdLBs []string
}

// lbNames are the load balancers zerodrop's controllers may write.
func (r *azureRun) lbNames() []string {
	if len(r.zdLBs) > 0 {
		return r.zdLBs
	}
	return azureLBNames
}

func (r *azureRun) class() string { return "zerodrop.dev/azure-" + r.ns }

// run sets up, runs the scenario and measures it from the emulator's
// record; setup writes are not counted.
func (r *azureRun) run(ctx context.Context, scenario string) (res report.Result, err error) {
	res = report.Result{Scenario: scenario, Mode: string(r.mode), Azure: &report.AzureFigures{}}
	defer r.removeJoined(context.WithoutCancel(ctx)) // once every writer has stopped
	if scenario == ScenarioRestartIdle && r.opts.IdleChange != IdleChangeNone {
		res.Azure.IdleChange = r.opts.IdleChange
	}
	if r.upstream() || scenario == ScenarioSharedLB {
		res.Azure.CCMLoadBalancers = r.opts.CCMLoadBalancers
	}
	switch {
	case scenario == ScenarioSharedLB:
		res.Mode = string(report.ModeZerodrop) + "+" + string(report.ModeUpstream)
		defer r.stopUpstream(context.WithoutCancel(ctx)) // after zerodrop's: runs last
		defer r.stopAll()
		err = r.setupShared(ctx)
	case r.upstream():
		defer r.stopUpstream(context.WithoutCancel(ctx))
		err = r.setupUpstream(ctx, scenario)
	case scenario == ScenarioRestartIdle:
		defer r.stopAll()
		err = r.setupNodeBacked(ctx, idleServicesOf(r.opts.IdleServices))
	case scenario == ScenarioChurn:
		defer r.stopAll()
		err = r.setupNodeBacked(ctx, churnServicesOf(r.opts.ChurnServices))
	default:
		defer r.stopAll()
		err = r.setup(ctx)
	}
	if err != nil {
		return res, err
	}
	if r.opts.FaultRate > 0 {
		r.emu.SetFaults(azurearm.Faults{Rate: r.opts.FaultRate, Cooldown: 3, SlowDelay: 50 * time.Millisecond})
	}
	before, beforeRetried := r.emu.Counters(), r.retried()
	_, mark := r.emu.Calls(0)
	beforeWarnings, beforeSurfaced := r.warningEvents()
	start := time.Now()
	switch {
	case scenario == ScenarioSharedLB:
		err = r.sharedLB(ctx, res.Azure)
	case scenario == ScenarioRestartIdle:
		err = r.restartIdle(ctx, res.Azure, &res)
	case scenario == "restart" && r.upstream():
		err = r.restartUpstream(ctx, res.Azure, &res)
	case scenario == "restart":
		err = r.restart(ctx, res.Azure)
	case scenario == ScenarioChurn:
		err = r.churn(ctx, res.Azure)
	case scenario == report.ScenarioKillMidPlan:
		err = r.killMidPlan(ctx, res.Azure, &res)
	}
	res.DurationSeconds = time.Since(start).Seconds()
	d := r.emu.Counters().Sub(before)
	calls, _ := r.emu.Calls(mark)
	f := figuresOf(calls)
	res.ProviderWrites, res.ProviderConflicts = int64(f.writes), int64(f.preconditionFailed)
	a := res.Azure
	a.LBPuts, a.PoolPuts, a.Gets, a.PreconditionFailed, a.WritesChanged = f.lbPuts, f.poolPuts, f.gets, f.preconditionFailed, f.changed
	a.Conflicts, a.Superseded = f.conflicts, f.superseded
	warnings, surfaced := r.warningEvents()
	a.ConflictsRetried, a.ConflictsSurfaced = r.retried()-beforeRetried, surfaced-beforeSurfaced
	a.Faults = d.InjectedConflicts + d.Throttled + d.ServerErrors + d.Slow
	a.WarningEvents = warnings - beforeWarnings
	if scenario == ScenarioSharedLB {
		a.Writers = writerFigures(calls)
		if werr := r.sharedWarnings(ctx, a.Writers); werr != nil && err == nil {
			err = werr
		}
	}
	if err == nil {
		err = r.countErr
	}
	return res, err
}

// setup creates the namespace, Services and EndpointSlices, starts the
// mode's controllers and waits until the load balancers hold everything.
func (r *azureRun) setup(ctx context.Context) error {
	if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", r.ns, err)
	}
	for i := 0; i < r.opts.Services; i++ {
		s := newAzureSvc(i, azureLBNames)
		if err := s.create(ctx, r.c, r.ns, r.class()); err != nil {
			return err
		}
		r.svcs = append(r.svcs, s)
	}
	// Two replicas with leader election, as deployed.
	for i := 0; i < 2; i++ {
		if _, err := r.start(true); err != nil {
			return err
		}
	}
	if _, err := r.waitConverged(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.progress("%s: set up %d Services on %v", r.ns, len(r.svcs), azureLBNames)
	return nil
}

func (r *azureRun) retried() (n int64) {
	for _, in := range r.instances {
		n += int64(in.counters().Conflicts)
	}
	return n
}

// warningEvents counts the Warning Events, and those that surfaced a
// conflict: as recorded in process, or as the API server has them from
// controller processes (one reading of both).
func (r *azureRun) warningEvents() (warnings, surfaced int64) {
	if r.procs.asProcesses || r.upstream() {
		return r.apiWarnings()
	}
	for _, in := range r.instances {
		warnings += in.warnings.Load()
		surfaced += in.surfaced.Load()
	}
	return warnings, surfaced
}

// leader is the running leader-elected controller that leads, if any.
func (r *azureRun) leader() *azureInstance {
	for _, in := range r.instances {
		if in.stopped.Load() || in.exited.Load() || !in.leaderElect {
			continue
		}
		if in.leads() {
			return in
		}
	}
	return nil
}

func (r *azureRun) stopAll() {
	for _, in := range r.instances {
		in.stop()
	}
}
