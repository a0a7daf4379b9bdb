package report

import "time"

// The chaos scenarios (make chaos): faults in the parts around the load
// balancer while it serves traffic.
const (
	ScenarioKillMidPlan   = "kill-mid-plan"
	ScenarioAPIServerDown = "apiserver-down"
)

// Defaults of the chaos scenarios (Options.Chaos overrides them).
const (
	// DefaultMidPlanKills is how often kill-mid-plan kills the writer.
	DefaultMidPlanKills = 20
	// DefaultAPIServerOutage is how long apiserver-down keeps the API server
	// stopped: longer than the controllers' lease (15 s), so every leader
	// loses it.
	DefaultAPIServerOutage = 30 * time.Second
)
