package report

// MaintenanceFigures are the maintenance scenario's own figures: the node
// tainted, how long nothing else changed, and what that stretch cost
// (writes counted where they land, requests failed, long connections
// broken); the restarts after it are in WritesPerRestart and
// Failed/BrokenPerRestart.
type MaintenanceFigures struct {
	Node   string `json:"node"`
	Signal string `json:"signal"` // MaintenanceSignals
	// WebSocketsThrough is how many of the lab's open WebSockets entered
	// by the node when it was marked (the scenario picks the node most
	// entered by).
	WebSocketsThrough int     `json:"websockets_through_node"`
	WaitSeconds       float64 `json:"wait_seconds"`
	WritesDuringWait  int64   `json:"writes_during_wait"`
	FailedDuringWait  int64   `json:"failed_requests_during_wait"`
	BrokenDuringWait  int64   `json:"broken_long_conns_during_wait"`
}

// The signals the maintenance scenario gives that a node leaves
// (MaintenanceFigures.Signal, the lab's --maintenance-signal).
const (
	// SignalTaint: the cluster autoscaler's deletion taint, which starts
	// no sync of the upstream service controller (the default).
	SignalTaint = "taint"
	// SignalExcludeLabel: the node.kubernetes.io/exclude-from-external-load-balancers
	// label, on which the service controller syncs at once
	// (shouldSyncUpdatedNode): a drain as an operator starts it.
	SignalExcludeLabel = "exclude-label"
)

// MaintenanceSignals are the signals, the default first.
var MaintenanceSignals = []string{SignalTaint, SignalExcludeLabel}
