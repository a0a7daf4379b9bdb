package report

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
	// Writes are the act's accepted writes by operation; Reads its
	// Describe calls; Refused its refused calls by error code.
	Writes  map[string]int `json:"writes_by_operation"`
	Reads   int            `json:"reads"`
	Refused map[string]int `json:"refused_by_code,omitempty"`
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
}
