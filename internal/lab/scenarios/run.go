package scenarios

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Recipe is the published recipe's workload settings (see docs/lab.md).
type Recipe struct {
	PreStopSleep time.Duration // preStop: sleep
	GracePeriod  time.Duration // terminationGracePeriodSeconds
	MinReady     time.Duration // the Deployment's minReadySeconds
}

// DefaultRecipe is the recipe as it is usually published.
var DefaultRecipe = Recipe{PreStopSleep: 30 * time.Second, GracePeriod: 60 * time.Second, MinReady: 30 * time.Second}

// DefaultGracePeriod is the workload's terminationGracePeriodSeconds in
// every mode but the recipe's: the Kubernetes default.
const DefaultGracePeriod = 30 * time.Second

// Workload shape, the same in every mode.
const (
	appName     = "web"
	servicePort = 8000
	podPort     = 8080
	replicas    = 3
)

// Backends and traffic policies a run can have.
const (
	BackendIP     = "ip"
	BackendNode   = "node"
	PolicyCluster = "cluster"
	PolicyLocal   = "local"
)

// run is one scenario in one mode, backend and traffic policy: its
// namespace, its HAProxy (in the load balancer's namespace), its controller
// pods and its traffic.
type run struct {
	lab      *lab
	id       int
	scenario string
	mode     report.Mode
	backend  string
	policy   string
	ns       string
	class    string
	dir      string
	// world is the run's side of Options.World.
	world    world.Run
	ctrls    *controllers
	addr     string // the load balancer's ingress address
	rec      *traffic.Recorder
	cordoned []string
	// tainted is maintenance's node, taintedAddrs its address (the
	// steady check leaves its backend out).
	tainted      []string
	taintedAddrs map[string]bool
	// restartWrites are restart-idle's and kill-mid-plan's writes per
	// restart; restartFailed and restartBroken restart-idle's requests
	// failed and long connections broken per restart.
	restartWrites                []int64
	restartFailed, restartBroken []int64
	maintenance                  *report.MaintenanceFigures
	// replicaFigures are lb-replica-restart's figures by phase.
	replicaFigures *report.ReplicaFigures
	// updateFigures are lb-update's figures.
	updateFigures *report.UpdateFigures
	chaos         *report.ChaosFigures // the chaos scenarios' own figures
	// dupSamples counts state samples with a backend doubled (sampleStates).
	dupSamples atomic.Int64
	stop       context.CancelFunc // the controller scrapes

	mu      sync.Mutex
	markers []report.Marker
}

func (r *run) key() string { return r.ns + "/" + appName }
func (r *run) name() string {
	return r.scenario + "/" + r.backend + "/" + r.policy + "/" + string(r.mode)
}

func (r *run) mark(format string, args ...any) {
	label := fmt.Sprintf(format, args...)
	r.mu.Lock()
	at := time.Duration(0)
	if r.rec != nil {
		at = time.Since(r.rec.Start)
	}
	r.markers = append(r.markers, report.Marker{At: at, Label: label})
	r.mu.Unlock()
	r.lab.logf("%s: %s at %.1fs", r.name(), label, at.Seconds())
}

// stopping tells the world (world.RestartObserver) that the writer's stop
// i is being sent.
func (r *run) stopping(i int, stop string) {
	if o, ok := r.world.(world.RestartObserver); ok {
		o.Stopping(i, stop)
	}
}
