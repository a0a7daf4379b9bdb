// Package scenarios runs the lab's scenarios: Execute starts what every run
// shares (the cluster package's control plane, network and node agent, the
// webhook and the drain Service), then gives each scenario, in each mode,
// backend and traffic policy, a run of its own: a namespace, HAProxy (or a
// data plane of replicas, or zerodrop installed from the chart), the
// controller pods, the workload and traffic, the act of the scenario, and
// the figures for the report. The scenario table is scenarios.go; one file
// per scenario family holds its acts.
package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Options configure a lab run.
type Options struct {
	// Scenarios to run, in order (names from the scenario list).
	Scenarios []string
	// Modes to run each scenario in, in order.
	Modes []report.Mode
	// Backends ("ip", "node") and TrafficPolicies ("cluster", "local") to
	// run each scenario with; default ip and cluster.
	Backends        []string
	TrafficPolicies []string
	// PolicyGiven: TrafficPolicies was asked for (--traffic-policy), not
	// the default; a scenario whose policy is only its default
	// (maintenance) then runs with TrafficPolicies.
	PolicyGiven bool
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
	// OutsideRate, when above 0, runs the outside client (internal/lab/outside)
	// beside each run's traffic at this many requests per second.
	OutsideRate int
	// Recipe is the recipe mode's workload (default DefaultRecipe).
	Recipe Recipe
	// GracePeriod is the workload pods' terminationGracePeriodSeconds in
	// the other modes (default DefaultGracePeriod): the gates' bound is
	// the grace period minus the shutdown budget, so a shorter one shows
	// where a bound ends.
	GracePeriod time.Duration
	// Chaos tunes the chaos scenarios (kill-mid-plan, apiserver-down).
	Chaos ChaosOptions
	// IdleRestarts is how often restart-idle (and maintenance) restarts
	// the writer (default DefaultIdleRestarts).
	IdleRestarts int
	// MaintenanceWait is how long maintenance leaves its tainted node
	// before the first restart (default DefaultMaintenanceWait).
	MaintenanceWait time.Duration
	// MaintenanceSignal is how maintenance marks its node leaving
	// (report.MaintenanceSignals; default report.SignalTaint).
	MaintenanceSignal string
	// UpdateRollouts makes lb-update roll the workload out again and again
	// while the data plane's DaemonSet updates (--data-plane-update-rollouts):
	// each node's surge then meets a rollout whose readiness and
	// termination gates count the replicas, both pods of that node among them.
	UpdateRollouts bool
	// TimedMax is the longest of lb-update's timed WebSockets' lifetimes
	// (0: twice the old pods' drain bound): shorter than the bound, every
	// one of them ends before its old pod's drain does.
	TimedMax time.Duration
	// UpdateEndNewReady ends lb-update's update once every node's new pod
	// is Ready and every old pod terminating, not gone
	// (--data-plane-update-end new-ready): with a grace period longer than
	// the scenario the old pods drain past its end, and the lab's
	// whole-run WebSockets end with the traffic instead of being cut.
	UpdateEndNewReady bool
	// AppExitOnSIGTERM makes the workload an app without SIGTERM handling:
	// it exits at SIGTERM and every connection it holds is closed as a
	// process exit closes it (podServer.exit; the default is a graceful
	// shutdown, podServer.shutdown).
	AppExitOnSIGTERM bool
	// World is the data plane and its writers every run is made in
	// (package world; the worlds are under internal/lab/worlds: one
	// HAProxy, HAProxy replicas, the chart's install, emulated Azure).
	World world.World
}

// lab is the running lab: control plane, node agent, drain Service and
// webhook, shared by every scenario; each scenario brings its own namespace,
// HAProxy and controllers.
type lab struct {
	opts  Options
	dir   string
	start time.Time
	cp    *cluster.ControlPlane
	net   *cluster.Network
	agent *cluster.Agent
	hook  *webhookServer
	// egress is the API server's path to Service-referenced webhooks
	// (egress.go).
	egress *cluster.EgressProxy
	runs   int

	curMu   sync.Mutex
	current *run           // the run under way, for the agent's onStop
	hooks   map[string]int // per namespace: preStop hooks that failed

	agentStop context.CancelFunc

	logMu      sync.Mutex
	logFile    *os.File
	progressMu sync.Mutex
}

// Execute runs the lab and returns a result per scenario and mode run (also
// when interrupted: the runs so far). Everything it started is stopped and
// its work directory removed before it returns.
func Execute(ctx context.Context, opts Options) (results []report.Result, err error) {
	if opts, err = withDefaults(opts); err != nil {
		return nil, err
	}
	if _, _, err := Plan(opts); err != nil {
		return nil, err
	}
	if opts.World == nil {
		return nil, fmt.Errorf("no world: Options.World is the data plane the runs are made in")
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
	defer l.klogToLog()()
	if err := l.startShared(ctx); err != nil {
		return nil, err
	}
	defer l.stopShared()
	return l.runAll(ctx)
}

// withDefaults fills in the options left zero.
func withDefaults(opts Options) (Options, error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Rate <= 0 {
		opts.Rate = traffic.DefaultRate
	}
	if opts.Recipe == (Recipe{}) {
		opts.Recipe = DefaultRecipe
	}
	if opts.Executable == "" {
		var err error
		if opts.Executable, err = os.Executable(); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// klogToLog sends klog's output (the upstream service controller,
// client-go) to the lab's log, not among the progress lines (errors still
// reach stderr), until the function it returns is called. SetOutput and
// LogToStderr take klog's lock, unlike SetLogger, so goroutines of an
// earlier lab in the same process may still log.
func (l *lab) klogToLog() (restore func()) {
	klog.LogToStderr(false)
	klog.SetOutput(klogWriter{l})
	return func() {
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	}
}

// variants are every backend with every traffic policy (default ip and
// cluster).
func variants(backends, policies []string) []variant {
	if len(backends) == 0 {
		backends = []string{BackendIP}
	}
	if len(policies) == 0 {
		policies = []string{PolicyCluster}
	}
	var out []variant
	for _, b := range backends {
		for _, p := range policies {
			out = append(out, variant{b, p})
		}
	}
	return out
}

// runAll runs each run of the plan (Plan), in order, until ctx ends.
func (l *lab) runAll(ctx context.Context) ([]report.Result, error) {
	plan, _, err := Plan(l.opts)
	if err != nil {
		return nil, err
	}
	var results []report.Result
	for _, p := range plan {
		sc, _ := ScenarioNamed(p.Scenario)
		v := variant{p.Backend, p.Policy}
		res, err := l.runScenario(ctx, sc, v, p.Mode)
		res.Err = err
		results = append(results, res)
		l.progressDone(sc, v, p.Mode, res)
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	return results, nil
}

// progressDone prints a run's outcome: its error, or its figures.
func (l *lab) progressDone(sc scenario, v variant, mode report.Mode, res report.Result) {
	if res.Err != nil {
		l.progressf("%-10s %-13s %-8s error: %v", sc.Name, v, mode, res.Err)
		return
	}
	l.progressf("%-10s %-13s %-8s done: %d requests, %d failed (%d late, %d by a client stall); %d long conns, %d closed, %d broken; %d writes, %d conflicts; %d hook failures, %d drain relay retries; %.1fs%s",
		sc.Name, v, mode, res.Requests, res.FailedRequests, res.RequestsLate, res.RequestsLateStall, res.LongConns, res.LongConnsClosed, res.LongConnsBroken,
		res.ProviderWrites, res.ProviderConflicts, res.HookFailures, res.DrainRelayRetries, res.DurationSeconds, report.Kinds(res.Timeline))
	if c := res.AzureClock; c != nil && c.Promise != nil {
		lost := res.FailedRequests > 0 || res.LongConnsBroken > 0
		switch {
		case c.Promise.Holds && lost:
			l.progressf("%-10s %-13s %-8s LOST WHERE ITS BOUND HOLDS (%s)", sc.Name, v, mode, c.Promise.Why)
		case !c.Promise.Holds:
			l.progressf("%-10s %-13s %-8s the bound promises nothing here (%s)", sc.Name, v, mode, c.Promise.Why)
		}
	}
	if verdict := awsBoundVerdict(res); verdict != "" {
		l.progressf("%-10s %-13s %-8s %s", sc.Name, v, mode, verdict)
	}
}

// awsBoundVerdict is the progress line's word on a gates run's bound on
// emulated AWS (report.AWSBound), as Azure's promise gets one: a loss
// where the bound holds, or a bound that promises nothing; "" otherwise.
// The health check's resets are AWS's connection termination, which no
// gate prevents (docs/aws.md), and a request the lab's own client sent
// late while its process stalled is the client's: neither is a loss here.
func awsBoundVerdict(res report.Result) string {
	if res.AWS == nil || res.AWS.GatesBound == nil {
		return ""
	}
	b := res.AWS.GatesBound
	requests, longConns := res.FailedRequests-res.RequestsLateStall, res.LongConnsBroken
	if h := res.AWS.HealthCheckResets; h != nil {
		requests, longConns = requests-h.Requests, longConns-h.LongConns
	}
	switch lost := requests > 0 || longConns > 0; {
	case b.Holds && lost:
		return fmt.Sprintf("LOST WHERE ITS BOUND HOLDS: %d requests and %d WebSockets beyond the health check's resets (%s)", max(requests, 0), max(longConns, 0), b.Why)
	case !b.Holds:
		return fmt.Sprintf("the bound promises nothing here (%s)", b.Why)
	}
	return ""
}

// variant is a run's backend and traffic policy.
type variant struct{ backend, policy string }

func (v variant) String() string { return v.backend + "/" + v.policy }

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
