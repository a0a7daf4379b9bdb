package report

// MaintenanceFigures are the maintenance scenario's own figures: the node
// tainted, how long nothing else changed, and what that stretch cost
// (writes counted where they land, requests failed, long connections
// broken); the restarts after it are in WritesPerRestart and
// Failed/BrokenPerRestart.
type MaintenanceFigures struct {
	Node             string  `json:"node"`
	Signal           string  `json:"signal"` // taint or exclude-label
	WaitSeconds      float64 `json:"wait_seconds"`
	WritesDuringWait int64   `json:"writes_during_wait"`
	FailedDuringWait int64   `json:"failed_requests_during_wait"`
	BrokenDuringWait int64   `json:"broken_long_conns_during_wait"`
}
