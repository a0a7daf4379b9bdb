package world

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
)

// The lab's conventions, which the runner and the worlds that run zerodrop
// processes of their own (a data plane of replicas, the chart's install)
// share: where controller pods live, how a run's objects are labelled, and
// the ports every zerodrop process of the lab listens on.
const (
	// ControllerNamespace holds every run's controller pods (and the
	// chart's release).
	ControllerNamespace = "zerodrop-system"
	// LabelRun labels a run's controller pods with its number.
	LabelRun = "lab.zerodrop.dev/run"
	// ControllerContainer is the container that runs zerodrop in the
	// runner's controller pods, in the chart's controller Deployment and in
	// its data-plane DaemonSet (beside haproxy).
	ControllerContainer = "controller"
	MetricsPort         = 8080
	ProbesPort          = 8081
	DrainPort           = 9090
	// IdleVerify is how long the lab watches for writes after a writer
	// restarted with nothing changed, before the next restart.
	IdleVerify = 5 * time.Second
)

// Lab is what a world's Prepare is given: the lab every run shares.
type Lab struct {
	Net   *cluster.Network
	CP    *cluster.ControlPlane
	Agent *cluster.Agent // not started yet: Prepare may add to it
	// Dir is the lab's work directory; Executable the lab's zerodrop
	// binary (what controller processes run).
	Dir, Executable string
	// Logf writes to the lab's log, Progressf to its progress lines too.
	Logf, Progressf func(format string, args ...any)
}

// Hosts is a World that needs more than one load-balancer host in the
// lab's network.
type Hosts interface {
	LoadBalancerHosts() int
}

// Installer is a World that installs zerodrop mode's zerodrop itself, per
// run (its webhook, drain Service, controllers and data plane): the runner
// then starts no webhook and drain Service of its own.
type Installer interface {
	InstallsZerodrop() bool
}

// KillDefault is a World with its own default count of kill-mid-plan's
// kills (ChaosOptions.MidPlanKills 0).
type KillDefault interface {
	MidPlanKills() int
}

// ControllerPods is a Run whose zerodrop controller pods are its own (the
// chart's Deployment): the runner finds them by this label set in
// ControllerNamespace instead of its own Deployment's.
type ControllerPods interface {
	ControllerSelector() map[string]string
}

// AdmissionWaiter is a Run whose webhook is its own: the runner creates
// the workload only once WaitAdmission has returned for probe, a pod of
// the workload (the webhook's failurePolicy is Ignore, so an earlier pod
// would run ungated).
type AdmissionWaiter interface {
	WaitAdmission(ctx context.Context, probe *corev1.Pod) error
}

// SlowRestarts is a Run whose writers come back slower than a replaced
// pod (the chart's containers wait out the kubelet's back-off): the act
// timeouts grow by these.
type SlowRestarts interface {
	// IdleRestart bounds one of restart-idle's restarts (default 40 s).
	IdleRestart() time.Duration
	// KillsBackoff is what kills of kill-mid-plan wait on top of each
	// kill's own recovery.
	KillsBackoff(kills int) time.Duration
}

// ShortPod drops the owner's name prefix of a pod's name, for timelines:
// web-7d9c…-x2k4p → x2k4p.
func ShortPod(name string) string {
	if i := len(name) - 5; i > 0 {
		return name[i:]
	}
	return name
}
