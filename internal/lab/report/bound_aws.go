package report

import (
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
)

// The gates' bound on AWS (docs/aws.md, "The bound, before any run"),
// evaluated at a run's clocks as PromiseAt does on Azure, so that a run on
// emulated AWS says whether the bound held there. The world supplies the
// clocks it read (internal/lab/worlds/aws); K and R are the docs'.
const (
	// boundAWSRead (R) is one DescribeTargetHealth under the budget: the
	// docs take it as 0, the lab's gates being the only reader besides
	// the CCM.
	boundAWSRead = 0
)

// AWSClock is what the gates' bound on AWS is evaluated at for one run:
// the target group's health check as the CCM set it (read from the
// emulator), zerodrop's --aws-health-max-age, --aws-propagation and
// --kube-proxy-sync-margin, and the workload's grace period.
type AWSClock struct {
	// Policy is the Service's externalTrafficPolicy (Local or Cluster).
	Policy string `json:"external_traffic_policy"`
	// HealthCheckIntervalSeconds (I) and the thresholds (U, and H beside
	// it) are the workload's target group's.
	HealthCheckIntervalSeconds float64 `json:"health_check_interval_seconds"`
	UnhealthyThreshold         int     `json:"unhealthy_threshold"`
	HealthyThreshold           int     `json:"healthy_threshold"`
	// HealthMaxAgeSeconds (A) and PropagationSeconds (P) are zerodrop's
	// --aws-health-max-age and --aws-propagation.
	HealthMaxAgeSeconds float64 `json:"health_max_age_seconds"`
	PropagationSeconds  float64 `json:"propagation_seconds"`
	// KubeProxyMarginSeconds (M) is zerodrop's --kube-proxy-sync-margin,
	// what the Cluster gate waits after kube-proxy's sync.
	KubeProxyMarginSeconds float64 `json:"kube_proxy_sync_margin_seconds"`
	// GraceSeconds (G) is the workload pods' terminationGracePeriodSeconds.
	GraceSeconds float64 `json:"grace_seconds"`
}

// AWSBound is the bound at a run's clocks: T, the longest a terminating
// pod is held by its gate, the shutdown budget B the grace period keeps
// after it, and whether T ≤ G − B (Holds, as Promise: the gates must lose
// nothing but the health check's resets there), with the formula at the
// run's values (Why).
type AWSBound struct {
	AWSClock
	BoundSeconds          float64 `json:"bound_seconds"`
	ShutdownBudgetSeconds float64 `json:"shutdown_budget_seconds"`
	Holds                 bool    `json:"holds"`
	Why                   string  `json:"why"`
}

// AWSBoundAt evaluates the gates' bound on AWS at c; nil for a mode
// without one (upstream and recipe). Local, the last pod on a node:
// T = K + U·I + A + R + P. Cluster: the endpoint's publication (taken as
// immediate), kube-proxy's sync and the margin, T = K + M, whatever I, U
// and P.
func AWSBoundAt(mode Mode, c AWSClock) *AWSBound {
	if mode != ModeGates {
		return nil
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	g := sec(c.GraceSeconds)
	b := drain.ShutdownBudgetOf(g, boundShutdown)
	var t time.Duration
	var formula, whatever string
	if c.Policy == "Local" {
		i, a, p := sec(c.HealthCheckIntervalSeconds), sec(c.HealthMaxAgeSeconds), sec(c.PropagationSeconds)
		t = boundKubeProxy + time.Duration(c.UnhealthyThreshold)*i + a + boundAWSRead + p
		formula = fmt.Sprintf("K + U·I + A + R + P = %s + %d·%s + %s + %s + %s = %s",
			boundKubeProxy, c.UnhealthyThreshold, i, a, time.Duration(boundAWSRead), p, t)
	} else { // Cluster, Kubernetes' default
		m := sec(c.KubeProxyMarginSeconds)
		t = boundKubeProxy + m
		formula = fmt.Sprintf("K + M = %s + %s = %s", boundKubeProxy, m, t)
		whatever = ", whatever I, U and P"
	}
	out := &AWSBound{AWSClock: c, BoundSeconds: t.Seconds(), ShutdownBudgetSeconds: b.Seconds(), Holds: t <= g-b}
	if out.Holds {
		out.Why = fmt.Sprintf("%s ≤ G − B = %s − %s%s", formula, g, b, whatever)
	} else {
		out.Why = fmt.Sprintf("%s > G − B = %s − %s%s", formula, g, b, whatever)
	}
	return out
}

// String is the bound's verdict as the report prints it: "bound held
// (bound 61 s, grace period 90 s): …" or "bound did not hold (…): …".
func (b AWSBound) String() string {
	verdict := "did not hold"
	if b.Holds {
		verdict = "held"
	}
	return fmt.Sprintf("bound %s (bound %g s, grace period %g s): %s", verdict, b.BoundSeconds, b.GraceSeconds, b.Why)
}
