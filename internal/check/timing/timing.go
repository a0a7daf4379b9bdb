// Package timing derives how long a load balancer takes to start sending
// traffic to a new backend (registration) and to stop sending new
// connections to, and finish with, a leaving one (deregistration), from each
// provider's documented health-check defaults, the Service's own annotations
// and command-line overrides. The sources are cited in docs/rules/timings.md.
package timing

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Provider names a load-balancer implementation.
type Provider string

// The providers zerodrop check knows the timings of.
const (
	Generic Provider = "generic"
	Azure   Provider = "azure"
	AWS     Provider = "aws"
	GKE     Provider = "gke"
	HAProxy Provider = "haproxy"
)

// Providers lists every provider, in the order the usage text shows them.
var Providers = []Provider{Generic, Azure, AWS, GKE, HAProxy}

// ParseProvider validates a --provider value.
func ParseProvider(s string) (Provider, error) {
	for _, p := range Providers {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Providers))
	for i, p := range Providers {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown provider %q (want %s)", s, strings.Join(names, ", "))
}

// Propagation is the allowance, in seconds, between a pod's state changing
// and the load balancer acting on it: the EndpointSlice update, its watch
// delivery to kube-proxy or to the load-balancer controller, and that
// controller's API call. It is an allowance, not a documented constant.
const Propagation = 5

// Overrides are the --registration-seconds and --deregistration-seconds
// flags. A negative value means the flag was not given.
type Overrides struct {
	Registration   int
	Deregistration int
}

// NoOverrides is the zero configuration: every value is derived.
var NoOverrides = Overrides{Registration: -1, Deregistration: -1}

// Timing is what one Service's load balancer needs, in whole seconds.
type Timing struct {
	// Registration is the time from a pod turning Ready until the load
	// balancer sends it new connections.
	Registration int
	// Deregistration is the time from a pod starting to terminate until the
	// load balancer no longer sends it new connections and has finished with
	// established ones (AWS's deregistration delay).
	Deregistration int
	// RegistrationWhy and DeregistrationWhy spell out the arithmetic.
	RegistrationWhy   string
	DeregistrationWhy string
	// Path is the Service's traffic model the timings follow.
	Path Path
}

// value is one health-check parameter and where it came from.
type value struct {
	n   int
	src string // "Azure default", "annotation …", …
}

func (v value) String() string { return fmt.Sprintf("%d (%s)", v.n, v.src) }

// healthCheck is a provider's health check for one Service port.
type healthCheck struct {
	name      string // how the provider calls the check, for explanations
	interval  value
	healthy   value // consecutive successes to send traffic
	unhealthy value // consecutive failures to stop sending new connections
	drain     value // deregistration delay; n == 0 when the provider has none
	notes     []string
}

// For returns the timing of svc's load balancer under provider p. A Service
// with several ports can have a health check per port; the slowest counts.
func For(p Provider, svc *corev1.Service, ov Overrides) Timing {
	t := Timing{Path: PathOf(p, svc)}
	first := true
	for _, hc := range healthChecks(p, svc) {
		if hc.drain.n > 0 && !t.Path.PodTargets {
			// The target is the node, which stays registered while a pod
			// terminates: the deregistration delay never starts for it.
			hc.notes = append(hc.notes, fmt.Sprintf("instance targets: a terminating pod deregisters nothing, so the %d s deregistration delay [%s] does not apply", hc.drain.n, hc.drain.src))
			hc.drain = value{}
		}
		reg := hc.interval.n*hc.healthy.n + Propagation
		unreg := hc.interval.n*hc.unhealthy.n + Propagation
		regWhy := fmt.Sprintf("%s interval %d s × %d healthy checks + %d s endpoint propagation = %d s [interval: %s; healthy threshold: %s]",
			hc.name, hc.interval.n, hc.healthy.n, Propagation, reg, hc.interval.src, hc.healthy.src)
		unregWhy := fmt.Sprintf("%s interval %d s × %d failed checks + %d s endpoint propagation = %d s [interval: %s; unhealthy threshold: %s]",
			hc.name, hc.interval.n, hc.unhealthy.n, Propagation, unreg, hc.interval.src, hc.unhealthy.src)
		if hc.drain.n > 0 {
			checks := hc.interval.n * hc.unhealthy.n
			unreg = max(checks, hc.drain.n) + Propagation
			unregWhy = fmt.Sprintf("max(%s %d s × %d failed checks = %d s, deregistration delay %d s [%s]) + %d s endpoint propagation = %d s",
				hc.name, hc.interval.n, hc.unhealthy.n, checks, hc.drain.n, hc.drain.src, Propagation, unreg)
		}
		if len(hc.notes) > 0 {
			note := " (" + strings.Join(hc.notes, "; ") + ")"
			regWhy += note
			unregWhy += note
		}
		if first || reg > t.Registration {
			t.Registration, t.RegistrationWhy = reg, regWhy
		}
		if first || unreg > t.Deregistration {
			t.Deregistration, t.DeregistrationWhy = unreg, unregWhy
		}
		first = false
	}
	t.RegistrationWhy = t.Path.Desc + "; " + t.RegistrationWhy
	t.DeregistrationWhy = t.Path.Desc + "; " + t.DeregistrationWhy
	if ov.Registration >= 0 {
		t.Registration = ov.Registration
		t.RegistrationWhy = fmt.Sprintf("%d s from --registration-seconds", ov.Registration)
	}
	if ov.Deregistration >= 0 {
		t.Deregistration = ov.Deregistration
		t.DeregistrationWhy = fmt.Sprintf("%d s from --deregistration-seconds", ov.Deregistration)
	}
	return t
}

// Max combines the timings of several Services selecting the same pods: the
// pods must satisfy the slowest load balancer. The path is the first one
// that registers pods or nodes (see Path.Registers), as that is where the
// registration rules apply.
func Max(ts []Timing) Timing {
	var out Timing
	for i, t := range ts {
		if i == 0 || (!out.Path.Registers() && t.Path.Registers()) {
			out.Path = t.Path
		}
		if i == 0 || t.Registration > out.Registration {
			out.Registration, out.RegistrationWhy = t.Registration, t.RegistrationWhy
		}
		if i == 0 || t.Deregistration > out.Deregistration {
			out.Deregistration, out.DeregistrationWhy = t.Deregistration, t.DeregistrationWhy
		}
	}
	return out
}

// Hint says which of the provider's settings shortens deregistration, for
// fix texts.
func Hint(p Provider) string {
	switch p {
	case Azure:
		return "or lower the " + AzureProbeInterval + " and " + AzureNumOfProbe + " annotations"
	case AWS:
		return "or lower " + awsDeregistrationDelay + " in the " + AWSTargetGroupAttrs + " annotation"
	case HAProxy:
		return "or lower the HAProxy server's inter and fall"
	}
	return "or pass the real timing with --deregistration-seconds"
}
