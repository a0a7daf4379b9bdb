package world

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/provider"
)

// View is one load balancer of a run whose backends must be steady (a
// data-plane replica's HAProxy), named for messages ("" for the one).
type View struct {
	Name     string
	Backends func(ctx context.Context) ([]provider.BackendStatus, error)
}

// Scrape is one zerodrop process's metrics endpoint: Key tells processes
// apart (a restarted process counts from zero), Name names it, IP is where
// it serves MetricsPort.
type Scrape struct {
	Key, Name, IP string
}

// DataPlane is a Run whose data plane is replicas, each HAProxy written by
// a zerodrop process of its own.
type DataPlane interface {
	// Replicas is how many replicas the run has (the report's figure).
	Replicas() int
	// Sessions are the connections each replica's HAProxy accepted.
	Sessions() []int64
	// Views are the replicas the traffic reaches now: the workload is
	// steady when each has its backends.
	Views() []View
	// Scrapes are the running data-plane processes' metrics endpoints.
	Scrapes() []Scrape
	// PodScrape: p, a pod in ControllerNamespace about to stop, is a
	// data-plane pod, scraped a last time at this endpoint (ok); any other
	// pod is the runner's.
	PodScrape(p *corev1.Pod) (last Scrape, ok bool)
	// PodStopping is the agent's call before a pod of the run is told to
	// stop, after its last scrape (a data-plane pod's termination marked;
	// its node's route stays).
	PodStopping(p *corev1.Pod)
}

// Writer is a process kill-mid-plan kills: its name, how to watch the
// writes it lands, how to kill it, and how to wait until the data plane
// has a writer again.
type Writer struct {
	Name    string
	OnWrite func(f func(verb string))
	Kill    func()
	Recover func(ctx context.Context) error
}

// MidPlanWriters is a Run whose writers kill-mid-plan kills are its own
// (a data plane's replicas, in turn), not the controllers' leader.
type MidPlanWriters interface {
	MidPlanWriter(ctx context.Context, kills int) (Writer, error)
}

// Act is what the runner lends a world's act: its timeline, and its
// notion of steady.
type Act struct {
	Mark func(format string, args ...any)
	// PhaseEnd waits until the workload is steady and returns the
	// requests failed (the client's own stalls not counted) and long
	// connections broken since the last phase ended (or the act began).
	PhaseEnd func() (failed, broken int64, err error)
	// WaitSteady waits until the workload is steady.
	WaitSteady func(ctx context.Context) error
	// Steady reports whether v has exactly the workload's backends, and
	// why not.
	Steady func(ctx context.Context, v View) (bool, string)
	// RestartWrites records one restart's writes.
	RestartWrites func(n int64)
}

// ReplicaDisruptor is a Run with a data plane of replicas to disrupt
// (lb-replica-restart): the world knows how its replicas restart, are
// replaced and fail; fig gets the figures of each phase.
type ReplicaDisruptor interface {
	DisruptReplicas(ctx context.Context, act Act, fig *report.ReplicaFigures) error
}
