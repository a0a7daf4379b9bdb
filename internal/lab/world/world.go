// Package world is the seam between the lab's runner (package scenarios)
// and what a run measures: a world is a data plane and its writers. The
// runner owns the cluster, the workload, the traffic and the scenarios'
// acts; a world owns how its load balancer starts and stops, what its
// backends are, which flags zerodrop's controllers get for it, which
// writers it runs itself (and how to restart one), and how its writes are
// counted. A world's variants (clocks, releases, machine types) are its
// options, not new worlds. The runner imports this package only, never a
// world's (TestScenariosImportNoWorld): a new cloud or router is one new
// package beside internal/lab/worlds/azure.
package world

import (
	"context"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/provider"
)

// World is a data plane and its writers, made once per lab (one point of
// a sweep).
type World interface {
	// Name names the world in progress lines and errors.
	Name() string
	// Prepare is called once per lab, after the shared network is up and
	// before the first run: what every run of the world needs of it.
	Prepare(ctx context.Context, lab Lab) error
	// NewRun is the world's side of one run, made before its setup (a
	// teardown after a failed setup calls its Stop).
	NewRun(env Env) Run
	// Clock is what the report records of the world's clocks for a run in
	// mode with the workload's grace period (nil: none).
	Clock(mode report.Mode, grace time.Duration) *report.AzureClock
}

// Env is what the runner tells a world's run about itself and the lab.
type Env struct {
	ID    int
	Mode  report.Mode
	NS    string // the run's namespace
	Key   string // the workload's Service, namespace/name
	Class string // the run's load-balancer class (zerodrop's controllers)
	Name  string // the run's name in logs
	Dir   string // the run's work directory
	// LabDir is the lab's work directory, which every run shares.
	LabDir string
	// Listener is the name zerodrop gives the Service port the lab's
	// traffic goes to (Backends reports it).
	Listener string
	CP       *cluster.ControlPlane
	Net      *cluster.Network
	// Logf writes to the lab's log, Progressf to its progress lines too;
	// Mark puts an event on the run's timeline.
	Logf, Progressf, Mark func(format string, args ...any)
	// WaitLeader waits until a controller pod other than not says it
	// holds the lease, by the runner's scrapes, and returns its name;
	// Gone tells the runner that the pod named name is no leader candidate
	// any more (its process is being ended).
	WaitLeader func(ctx context.Context, not string) (string, error)
	Gone       func(name string)
}

// Run is a world's side of one run.
type Run interface {
	// Start starts the run's load balancer (and the writers the world
	// runs itself, OwnsWriters).
	Start(ctx context.Context) error
	// Stop stops everything Start started; it may be called after a
	// failed or no Start.
	Stop()
	// OwnsWriters: the world runs the mode's writer itself, so the runner
	// starts no controller pods for it.
	OwnsWriters() bool
	// ControllerArgs are the flags of the mode's controller pods (zerodrop's
	// controller, or the upstream service controller's process) for the
	// world, given the runner's base (command, kubeconfig, class, pool);
	// the runner adds the endpoints and leader election.
	ControllerArgs(base []string) []string
	// Service adds what the world needs to the workload's Service before
	// it is created; ServiceCreated is told the Service as created.
	Service(svc *corev1.Service)
	ServiceCreated(svc *corev1.Service)
	// Forwards are the addresses zerodrop's controller pods reach on
	// their loopback (the agent forwards them), besides the API server.
	Forwards() []string
	// Backends are the Service's backends at addr, its ingress address
	// and port, as the data plane has them.
	Backends(ctx context.Context, addr string) ([]provider.BackendStatus, error)
	// Writes are the writes the load balancer accepted so far, every
	// writer's.
	Writes() (int64, error)
	// SteadyTimeout is what the world adds to the time a workload of n
	// replicas may take to be steady.
	SteadyTimeout(n int32) time.Duration
}

// Defaults, embedded in a Run, are the answers of a world whose writers
// are the runner's controller pods, which adds no flags to theirs, nothing
// to the workload's Service, forwards nothing to the controller pods and
// adds nothing to the steady timeout.
type Defaults struct{}

func (Defaults) OwnsWriters() bool                     { return false }
func (Defaults) ControllerArgs(base []string) []string { return base }

func (Defaults) Service(*corev1.Service)           {}
func (Defaults) ServiceCreated(*corev1.Service)    {}
func (Defaults) Forwards() []string                { return nil }
func (Defaults) SteadyTimeout(int32) time.Duration { return 0 }

// WriteWatcher is a Run whose writes can be watched as they land:
// kill-mid-plan kills the writer from inside its first write of a plan.
type WriteWatcher interface {
	// OnWrite makes f be called with each write's verb as it lands,
	// before it is passed on; nil: no more.
	OnWrite(f func(verb string))
}

// WriterRestarter is a Run whose world runs the writer itself
// (OwnsWriters or beside zerodrop's gates): restart-idle restarts that
// writer through it.
type WriterRestarter interface {
	// RestartsWriter: the run's writer is the world's in its mode.
	RestartsWriter() bool
	// RestartWriter waits until a writer leads, calls atKill, sends sig
	// to the leader, starts its replacement and waits until another
	// writer leads.
	RestartWriter(ctx context.Context, sig syscall.Signal, atKill func(leader string)) error
}

// IdleStop is how restart-idle's restart i (from 0) stops the writer, in
// every world: SIGKILL and SIGTERM in turn, as an OOM kill or the kubelet
// would; name is the signal's name in reports.
func IdleStop(i int) (sig syscall.Signal, name string) {
	if i%2 == 1 {
		return syscall.SIGTERM, "SIGTERM"
	}
	return syscall.SIGKILL, "SIGKILL"
}

// Variant is a World that says which of its variants (its options) a lab
// runs, for --dry-run.
type Variant interface {
	Variant() string
}

// Measurer is a Run that measures the act itself, beside what the runner
// measures (on emulated Azure: the ARM record's writes by kind, 412s,
// injected faults, Warning Events).
type Measurer interface {
	// ActStart is called once the run is steady, before its traffic and
	// act: what the world counts from here is the act's.
	ActStart(ctx context.Context) error
	// ActEnd is called once the act is over; it adds the world's figures
	// of the act to res, and fails the run where the world's own checks
	// do.
	ActEnd(ctx context.Context, res *report.Result) error
}

// ProbeDecider is a Run whose zerodrop provider leaves a node-mode
// externalTrafficPolicy Local Service's nodes to the load balancer's probe
// (provider.ProbeDecider: every node stays active, the probe takes out those
// without a ready local endpoint), so steady means the serving nodes up,
// not the others drained.
type ProbeDecider interface {
	ProbeDecidesLocal() bool
}

// RestartObserver is a Run told of each stop of the writer in the
// scenarios that stop it (restart-idle, kill-mid-plan), as it is sent:
// i from 0, stop the signal's name. The world's figures per restart are
// cut there.
type RestartObserver interface {
	Stopping(i int, stop string)
}

// Outage is a Run with something to change while the writer is down:
// restart-idle calls DuringOutage(i) once stop i has been sent, before a
// new writer leads (a world that restarts its own writer calls it
// itself).
type Outage interface {
	DuringOutage(ctx context.Context, i int) error
}

// Churner is a Run with churn of its own: the churn scenario runs Churn
// beside its own changes, until ctx ends (the world counts them among its
// figures).
type Churner interface {
	Churn(ctx context.Context) error
}

// Resolver is a Run whose load balancer's ingress is a DNS name, not an
// address (on AWS the CCM writes the NLB's hostname into the Service's
// status): the runner sends its traffic to the address Resolve maps the
// name to, as a client's resolver would.
type Resolver interface {
	Resolve(ctx context.Context, hostname string) (ip string, err error)
}
