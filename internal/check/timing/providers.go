package timing

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotations read from a Service. Only those of the selected provider count:
// an Azure annotation does not change an AWS load balancer.
const (
	AzureProbeInterval = "service.beta.kubernetes.io/azure-load-balancer-health-probe-interval"
	AzureNumOfProbe    = "service.beta.kubernetes.io/azure-load-balancer-health-probe-num-of-probe"
	// azurePortPattern is cloud-provider-azure's per-port form,
	// service.beta.kubernetes.io/port_{port}_health-probe_{param}; it wins
	// over the Service-wide annotation.
	azurePortPattern = "service.beta.kubernetes.io/port_%d_health-probe_%s"

	AWSHealthCheckInterval  = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval"
	AWSHealthyThreshold     = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold"
	AWSUnhealthyThreshold   = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold"
	AWSTargetGroupAttrs     = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
	AWSConnDrainingEnabled  = "service.beta.kubernetes.io/aws-load-balancer-connection-draining-enabled"
	AWSConnDrainingTimeout  = "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout"
	awsDeregistrationDelay  = "deregistration_delay.timeout_seconds"
	awsDefaultDeregistering = 300
)

// healthChecks returns the health checks provider p configures for svc: one
// per Service port where the provider allows per-port settings, else one.
func healthChecks(p Provider, svc *corev1.Service) []healthCheck {
	switch p {
	case Azure:
		return azureChecks(svc)
	case AWS:
		return []healthCheck{awsCheck(svc)}
	case GKE:
		return []healthCheck{gkeCheck(svc)}
	case HAProxy:
		// HAProxy's server defaults: "inter 2s", "rise 2", "fall 3".
		return []healthCheck{{
			name:      "HAProxy check",
			interval:  value{2, "HAProxy default inter 2s"},
			healthy:   value{2, "HAProxy default rise 2"},
			unhealthy: value{3, "HAProxy default fall 3"},
		}}
	default:
		// Conservative: the slowest health-check defaults among the
		// supported providers (AWS NLB: 10 s, 3 and 3), without AWS's
		// deregistration delay, which is specific to target groups.
		return []healthCheck{{
			name:      "generic health check",
			interval:  value{10, "generic, conservative"},
			healthy:   value{3, "generic, conservative"},
			unhealthy: value{3, "generic, conservative"},
		}}
	}
}

func azureChecks(svc *corev1.Service) []healthCheck {
	base := healthCheck{
		name:      "Azure LB probe",
		interval:  value{5, "cloud-provider-azure default"},
		healthy:   value{2, "cloud-provider-azure default num-of-probe"},
		unhealthy: value{2, "cloud-provider-azure default num-of-probe"},
	}
	base.interval, base.notes = intAnnotation(svc, AzureProbeInterval, base.interval, base.notes)
	base.healthy, base.notes = intAnnotation(svc, AzureNumOfProbe, base.healthy, base.notes)
	// Azure's probe threshold counts both ways: the same number of probes
	// marks a backend up and down.
	base.unhealthy = base.healthy
	if svc == nil || len(svc.Spec.Ports) == 0 {
		return []healthCheck{base}
	}
	var out []healthCheck
	for _, sp := range svc.Spec.Ports {
		hc := base
		hc.notes = append([]string(nil), base.notes...)
		hc.interval, hc.notes = intAnnotation(svc, fmt.Sprintf(azurePortPattern, sp.Port, "interval"), hc.interval, hc.notes)
		hc.healthy, hc.notes = intAnnotation(svc, fmt.Sprintf(azurePortPattern, sp.Port, "num-of-probe"), hc.healthy, hc.notes)
		hc.unhealthy = hc.healthy
		out = append(out, hc)
	}
	return out
}

func awsCheck(svc *corev1.Service) healthCheck {
	hc := healthCheck{
		name:      "AWS NLB target group health check",
		interval:  value{10, "AWS Load Balancer Controller default"},
		healthy:   value{3, "AWS Load Balancer Controller default"},
		unhealthy: value{3, "AWS Load Balancer Controller default"},
		drain:     value{awsDefaultDeregistering, "AWS target group default"},
	}
	hc.interval, hc.notes = intAnnotation(svc, AWSHealthCheckInterval, hc.interval, hc.notes)
	hc.healthy, hc.notes = intAnnotation(svc, AWSHealthyThreshold, hc.healthy, hc.notes)
	hc.unhealthy, hc.notes = intAnnotation(svc, AWSUnhealthyThreshold, hc.unhealthy, hc.notes)
	if svc == nil {
		return hc
	}
	if attrs, ok := svc.Annotations[AWSTargetGroupAttrs]; ok {
		for _, kv := range strings.Split(attrs, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			if strings.TrimSpace(k) != awsDeregistrationDelay {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				hc.notes = append(hc.notes, fmt.Sprintf("ignored invalid %s=%q in %s", awsDeregistrationDelay, v, AWSTargetGroupAttrs))
				continue
			}
			hc.drain = value{n, "annotation " + AWSTargetGroupAttrs}
		}
		return hc
	}
	// The legacy in-tree Classic ELB calls the same thing connection draining.
	if strings.EqualFold(svc.Annotations[AWSConnDrainingEnabled], "true") {
		hc.drain, hc.notes = intAnnotation(svc, AWSConnDrainingTimeout, hc.drain, hc.notes)
	}
	return hc
}

// gkeCheck returns the L4 load balancer health check GKE creates: its
// interval and unhealthy threshold depend on externalTrafficPolicy (a shared
// node check for Cluster, a per-Service check of kube-proxy's health check
// node port for Local). GKE has no Service annotation to change them.
func gkeCheck(svc *corev1.Service) healthCheck {
	if svc != nil && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return healthCheck{
			name:      "GKE L4 health check (externalTrafficPolicy Local)",
			interval:  value{3, "GKE default for Local"},
			healthy:   value{1, "GKE default"},
			unhealthy: value{2, "GKE default for Local"},
		}
	}
	return healthCheck{
		name:      "GKE L4 health check (externalTrafficPolicy Cluster)",
		interval:  value{8, "GKE default for Cluster"},
		healthy:   value{1, "GKE default"},
		unhealthy: value{3, "GKE default for Cluster"},
	}
}

// intAnnotation replaces def with the annotation's value when it is a
// positive integer. A malformed value is ignored, as the provider would
// reject it, and noted for --explain.
func intAnnotation(svc *corev1.Service, key string, def value, notes []string) (value, []string) {
	if svc == nil {
		return def, notes
	}
	raw, ok := svc.Annotations[key]
	if !ok {
		return def, notes
	}
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n <= 0 {
		return def, append(notes, fmt.Sprintf("ignored invalid annotation %s=%q", key, raw))
	}
	return value{n, "annotation " + key}, notes
}
