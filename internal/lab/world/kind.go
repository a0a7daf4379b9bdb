package world

// Kind names a world in the table of where each scenario runs
// (scenarios.Table).
type Kind string

// The lab's worlds.
const (
	// OneHAProxy is one HAProxy on the load-balancer host
	// (internal/lab/worlds/haproxy).
	OneHAProxy Kind = "one HAProxy"
	// Replicas is zerodrop mode's HAProxy data plane of replicas, each
	// written by its own zerodrop process (--data-plane-replicas).
	Replicas Kind = "HAProxy replicas"
	// Chart is zerodrop installed from the chart, its data plane a
	// DaemonSet (--from-chart).
	Chart Kind = "the chart's install"
	// Azure is emulated Azure with traffic through azuredp
	// (internal/lab/worlds/azure).
	Azure Kind = "emulated Azure"
)
