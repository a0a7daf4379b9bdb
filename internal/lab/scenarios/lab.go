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
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
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
		if opts.Executable, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	var scs []scenario
	for _, name := range opts.Scenarios {
		sc, ok := ScenarioNamed(name)
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
				if mode.NodeBacked() {
					// The upstream controller is node-backed by nature
					// (--backend is zerodrop's): it runs once per traffic
					// policy, in the first variant of that policy. Nothing
					// changes in restart-idle but the controller, which the
					// recipe leaves as upstream has it: that runs once, as
					// upstream.
					k := string(mode) + "/" + sc.Name + "/" + v.policy
					if seenNode[k] || mode == report.ModeRecipe && sc.Name == scenarioRestartIdle {
						continue
					}
					seenNode[k] = true
					v = variant{BackendNode, v.policy}
				}
				res, err := l.runScenario(ctx, sc, v, mode)
				res.Err = err
				results = append(results, res)
				if err != nil {
					l.progressf("%-10s %-13s %-8s error: %v", sc.Name, v, mode, err)
				} else {
					l.progressf("%-10s %-13s %-8s done: %d requests, %d failed (%d late, %d by a client stall); %d long conns, %d closed, %d broken; %d writes, %d conflicts; %d hook failures, %d drain relay retries; %.1fs%s",
						sc.Name, v, mode, res.Requests, res.FailedRequests, res.RequestsLate, res.RequestsLateStall, res.LongConns, res.LongConnsClosed, res.LongConnsBroken,
						res.ProviderWrites, res.ProviderConflicts, res.HookFailures, res.DrainRelayRetries, res.DurationSeconds, report.Kinds(res.Timeline))
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
