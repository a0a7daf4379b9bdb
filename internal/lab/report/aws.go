package report

import (
	"fmt"
	"io"
)

// AWSFigures are what the world of emulated AWS counts in a run's act
// from its emulator's record (internal/lab/worlds/aws).
type AWSFigures struct {
	// CCMRelease is the cloud-provider-aws release whose CCM wrote.
	CCMRelease string `json:"ccm_release"`
	// The emulator's clocks: the registration delay and propagation time
	// (lab options, field reports) and the target groups' deregistration
	// delay.
	RegistrationDelaySeconds   float64 `json:"registration_delay_seconds"`
	PropagationSeconds         float64 `json:"propagation_seconds"`
	DeregistrationDelaySeconds float64 `json:"deregistration_delay_seconds"`
	// LoadBalancer is the workload's NLB's DNS name, Frontend the address
	// the lab resolves it to.
	LoadBalancer string `json:"load_balancer,omitempty"`
	// Writes are the CCM's accepted writes in the act by operation; Reads
	// its Describe calls; Refused its refused calls by error code.
	Writes  map[string]int `json:"writes_by_operation"`
	Reads   int            `json:"reads"`
	Refused map[string]int `json:"refused_by_code,omitempty"`
	// Zerodrop is what zerodrop's gates called in the act (gates mode),
	// told from the CCM's calls by the key that signed them.
	Zerodrop *AWSCalls `json:"zerodrop,omitempty"`
	// HealthCheckResets are the act's failed requests and broken
	// WebSockets that were reset (RST) as a target of the Service turned
	// unhealthy in the data plane: AWS's connection termination on an
	// unhealthy target, which no gate can prevent (docs/aws.md), counted
	// apart from the other failures.
	HealthCheckResets *AWSResets `json:"health_check_resets,omitempty"`
	// Stops are the writer's stops (restart-idle, maintenance), by
	// signal; WritesPerStop the accepted writes by operation from each
	// stop to the next (the last: to the act's end).
	Stops         []string         `json:"stops,omitempty"`
	WritesPerStop []map[string]int `json:"writes_by_operation_per_stop,omitempty"`
	// SyncErrors counts the CCM's "Error syncing load balancer" lines in
	// the act; MetadataConnections the connections its instance-metadata
	// client made (it must make none).
	SyncErrors          int   `json:"ccm_sync_errors"`
	MetadataConnections int64 `json:"metadata_connections"`
	// GatesBound is docs/aws.md's bound on the gates at the run's clocks
	// (AWSBoundAt, bound_aws.go): gates mode only, none when the world
	// could not read the clocks (its reason is in the lab's log).
	GatesBound *AWSBound `json:"gates_bound,omitempty"`
}

// writeAWSBound prints, under the table, whether each run's bound on
// AWS held; nothing for a run without one.
func writeAWSBound(w io.Writer, r Result) {
	if r.AWS == nil || r.AWS.GatesBound == nil {
		return
	}
	fmt.Fprintf(w, "%s %s: %s\n", r.row(), r.column(), r.AWS.GatesBound)
}

// AWSCalls are one client's calls in a stretch of the record.
type AWSCalls struct {
	// Writes are the calls other than Describe*, accepted or not, by
	// operation; Reads the Describe calls by operation; Refused the
	// refused calls by error code.
	Writes  map[string]int `json:"writes_by_operation"`
	Reads   map[string]int `json:"reads_by_operation"`
	Refused map[string]int `json:"refused_by_code,omitempty"`
}

// AWSResets count the failures a health check's reset explains.
type AWSResets struct {
	// Unhealthy is how many times a target of the Service turned
	// unhealthy with its connections reset, in the act.
	Unhealthy int `json:"targets_turned_unhealthy"`
	// Requests and LongConns are the failed requests and broken
	// WebSockets reset within a moment of one of those turns, Requests
	// with those that timed out in flight at one (their answer reset).
	Requests  int64 `json:"requests"`
	LongConns int64 `json:"long_conns"`
}
