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
	// AzureTraffic is emulated Azure with traffic through azuredp
	// (internal/lab/worlds/azure).
	AzureTraffic Kind = "Azure with traffic"
	// AzureWrites is emulated Azure counting ARM writes, without traffic
	// (internal/lab/worlds/azurewrites).
	AzureWrites Kind = "Azure counting writes"
)
