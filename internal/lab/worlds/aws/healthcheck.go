package aws

import (
	"fmt"
	"strconv"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// The health check a run asks the CCM for (Options.HealthCheck), through
// the Service annotations cloud-provider-aws v1.37.1 reads in
// buildNLBHealthCheckConfiguration (pkg/providers/v1/aws.go:2178-2258):
// the CCM itself then writes the scaled check into the target group, as a
// user's annotations would on AWS, and the emulator checks the values
// against AWS's ranges (awsapi's validHealthCheck).
const (
	annotationHCInterval  = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval"
	annotationHCTimeout   = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-timeout"
	annotationHCHealthy   = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold"
	annotationHCUnhealthy = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold"
)

// ccmCheckTimeout is the timeout the CCM sets on both policies' checks
// (aws.go:2194 for Local, defaultNlbHealthCheckTimeout for Cluster).
const ccmCheckTimeout = 10 * time.Second

// HealthCheck is a health check's timing, in AWS's ranges; a zero field
// keeps the CCM's value (Local: every 10 s, thresholds 2; Cluster: every
// 30 s, thresholds 3).
type HealthCheck struct {
	// Interval is the time between checks: whole seconds, 5 s to 300 s
	// (CreateTargetGroup's HealthCheckIntervalSeconds). The timeout is set
	// with it: the CCM's 10 s, cut to the interval so that one check ends
	// before the next is due.
	Interval time.Duration
	// Thresholds is both the healthy and the unhealthy threshold: 2 to 10.
	Thresholds int
}

// Validate refuses a timing AWS would refuse, before any run.
func (h HealthCheck) Validate() error {
	if h.Interval != 0 && (h.Interval < 5*time.Second || h.Interval > 300*time.Second || h.Interval%time.Second != 0) {
		return fmt.Errorf("health-check interval %s: want whole seconds from 5s to 300s (AWS's range), or 0 for the CCM's", h.Interval)
	}
	if h.Thresholds != 0 && (h.Thresholds < 2 || h.Thresholds > 10) {
		return fmt.Errorf("health-check thresholds %d: want 2 to 10 (AWS's range), or 0 for the CCM's", h.Thresholds)
	}
	return nil
}

// annotations are the Service annotations that ask the CCM for h.
func (h HealthCheck) annotations() map[string]string {
	out := map[string]string{}
	if h.Interval != 0 {
		out[annotationHCInterval] = strconv.Itoa(int(h.Interval / time.Second))
		out[annotationHCTimeout] = strconv.Itoa(int(min(h.Interval, ccmCheckTimeout) / time.Second))
	}
	if h.Thresholds != 0 {
		out[annotationHCHealthy] = strconv.Itoa(h.Thresholds)
		out[annotationHCUnhealthy] = strconv.Itoa(h.Thresholds)
	}
	return out
}

// String is h as the lab's variant line names it.
func (h HealthCheck) String() string {
	interval, thresholds := "the CCM's", "the CCM's"
	if h.Interval != 0 {
		interval = h.Interval.String()
	}
	if h.Thresholds != 0 {
		thresholds = strconv.Itoa(h.Thresholds)
	}
	return fmt.Sprintf("every %s, thresholds %s", interval, thresholds)
}

// turnHealthy is the longest a target takes from its first check to
// healthy under h, of both policies' checks: the healthy threshold's
// checks, an interval apart.
func (h HealthCheck) turnHealthy() time.Duration {
	var longest time.Duration
	for _, c := range []awsapi.CheckSpec{awsapi.LocalCheck, awsapi.ClusterCheck} {
		interval, n := c.Interval, c.HealthyThreshold
		if h.Interval != 0 {
			interval = h.Interval
		}
		if h.Thresholds != 0 {
			n = h.Thresholds
		}
		longest = max(longest, time.Duration(n)*interval)
	}
	return longest
}
