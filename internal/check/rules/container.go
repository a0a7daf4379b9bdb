package rules

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"zerodrop.dev/zerodrop/internal/check/timing"
)

// Probe defaults the API server applies (SetDefaults_Probe).
const (
	defaultPeriodSeconds    = 10
	defaultFailureThreshold = 3
)

// checkProbes is ZD101 and ZD102.
func (c *check) checkProbes(ctr *corev1.Container) {
	if ctr.ReadinessProbe == nil {
		if c.readinessGatedBy(ctr) != "" {
			return
		}
		c.add("ZD101", ctr.Name,
			fmt.Sprintf("container %q has no readinessProbe: it counts as Ready as soon as it has started, so the load balancer and the rollout treat it as serving before the process accepts connections", ctr.Name),
			"add a readinessProbe that checks the serving port (httpGet on a readiness endpoint, or tcpSocket on the port)")
		return
	}
	if ctr.LivenessProbe != nil && equality.Semantic.DeepEqual(defaultedProbe(ctr.ReadinessProbe), defaultedProbe(ctr.LivenessProbe)) {
		c.add("ZD102", ctr.Name,
			fmt.Sprintf("container %q: the readinessProbe equals the livenessProbe: the application cannot report itself not ready (overloaded, draining) without being restarted, and a failing dependency restarts every pod at once", ctr.Name),
			"give readiness its own endpoint that also fails while draining; keep liveness to detecting a stuck process, with a higher failureThreshold",
			"probes compared after the API defaults (timeoutSeconds 1, periodSeconds 10, successThreshold 1, failureThreshold 3, httpGet path / and scheme HTTP)")
	}
	c.checkSlowStart(ctr)
}

// checkSlowStart is ZD105: the readinessProbe's initialDelaySeconds says the
// container takes that long to start, but the livenessProbe restarts it
// earlier — its failureThreshold-th failed check, at initialDelaySeconds +
// periodSeconds × (failureThreshold − 1) — and no startupProbe holds the
// liveness probe back. The new pod of a rollout is killed before it can
// become ready, again and again.
func (c *check) checkSlowStart(ctr *corev1.Container) {
	if ctr.StartupProbe != nil || ctr.LivenessProbe == nil || ctr.ReadinessProbe == nil {
		return
	}
	l, r := defaultedProbe(ctr.LivenessProbe), defaultedProbe(ctr.ReadinessProbe)
	kill := l.InitialDelaySeconds + l.PeriodSeconds*(l.FailureThreshold-1)
	if kill > r.InitialDelaySeconds {
		return
	}
	c.add("ZD105", ctr.Name,
		fmt.Sprintf("container %q: the livenessProbe restarts a container that has not answered by %d s, but its readinessProbe does not check before %d s and there is no startupProbe: a container as slow to start as the readiness delay says is killed before it can become ready, so every rollout's new pods restart in a loop instead of taking traffic", ctr.Name, kill, r.InitialDelaySeconds),
		fmt.Sprintf("add a startupProbe (e.g. the liveness check with periodSeconds: 5 and failureThreshold: %d, covering %d s), which holds liveness and readiness back until it passes; or raise the livenessProbe's initialDelaySeconds above %d", (r.InitialDelaySeconds+60)/5, r.InitialDelaySeconds+60, r.InitialDelaySeconds),
		fmt.Sprintf("liveness initialDelaySeconds %d + periodSeconds %d × (failureThreshold %d − 1) = %d s ≤ readiness initialDelaySeconds %d", l.InitialDelaySeconds, l.PeriodSeconds, l.FailureThreshold, kill, r.InitialDelaySeconds),
		"path: "+c.timing.Path.Desc)
}

// defaultedProbe returns a copy of p with the API server's defaults applied,
// so that an unset field equals its explicit default.
func defaultedProbe(p *corev1.Probe) *corev1.Probe {
	d := p.DeepCopy()
	if d.TimeoutSeconds == 0 {
		d.TimeoutSeconds = 1
	}
	if d.PeriodSeconds == 0 {
		d.PeriodSeconds = defaultPeriodSeconds
	}
	if d.SuccessThreshold == 0 {
		d.SuccessThreshold = 1
	}
	if d.FailureThreshold == 0 {
		d.FailureThreshold = defaultFailureThreshold
	}
	if h := d.HTTPGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = corev1.URISchemeHTTP
		}
	}
	return d
}

// checkPreStop is ZD201–ZD204, the termination side of a rollout.
func (c *check) checkPreStop(ctr *corev1.Container) {
	dereg := c.timing.Deregistration
	injected := c.nsLabels[InjectLabel] == "enabled"
	d := preStopDelay(ctr, dereg, injected)
	deregWhy := "deregistration: " + c.timing.DeregistrationWhy
	drainFix := fmt.Sprintf("add lifecycle.preStop.sleep.seconds: %d (or exec [\"sleep\", \"%d\"]) with terminationGracePeriodSeconds above it, or use the zerodrop drain hook (label the namespace %s=enabled)", dereg, dereg, InjectLabel)

	// An injected container whose stop is unknown is named, not guessed.
	explain := func(lines ...string) []string { return append(lines, c.injectionNotes()...) }
	switch d.kind {
	case delayNone:
		c.add("ZD201", ctr.Name,
			fmt.Sprintf("container %q has no preStop delay: it gets SIGTERM as soon as the pod starts terminating, while the load balancer may route connections to it for up to %d s (its deregistration time)", ctr.Name, dereg),
			drainFix, explain(deregWhy)...)
	case delayUnknown:
		c.add("ZD201", ctr.Name,
			fmt.Sprintf("container %q has %s, which is not a recognised delay (sleep action, exec sleep, zerodrop drain hook): if it returns at once, the container gets SIGTERM while the load balancer may route connections to it for up to %d s (its deregistration time)", ctr.Name, d.what, dereg),
			drainFix+"; if the hook already waits at least that long, suppress with the annotation "+IgnoreAnnotation+": ZD201",
			explain(deregWhy)...)
	case delaySleep:
		if d.seconds < float64(dereg) {
			c.add("ZD202", ctr.Name,
				fmt.Sprintf("container %q: the preStop delay of %s (%s) is shorter than the load balancer's deregistration time of %d s: the container gets SIGTERM while the load balancer may still route connections to it, for up to %s more", ctr.Name, seconds(d.seconds), d.what, dereg, seconds(float64(dereg)-d.seconds)),
				fmt.Sprintf("raise the preStop delay to at least %d s with terminationGracePeriodSeconds above it, use the zerodrop drain hook, %s", dereg, timing.Hint(c.cfg.Provider)),
				explain(deregWhy, fmt.Sprintf("%s < %d s", seconds(d.seconds), dereg))...)
		}
	}

	grace, graceWhy := c.gracePeriod()
	c.checkShortGrace(ctr, d, grace, graceWhy)
	if d.known() && float64(grace) <= d.seconds {
		fix := fmt.Sprintf("set terminationGracePeriodSeconds to the preStop delay plus the application's shutdown time, e.g. %d", int64(math.Ceil(d.seconds))+15)
		if math.IsInf(d.seconds, 1) {
			fix = "replace the endless sleep with one of the load balancer's deregistration time, and set terminationGracePeriodSeconds above it"
		}
		explain := []string{fmt.Sprintf("%s ≤ preStop delay %s (%s)", graceWhy, seconds(d.seconds), d.what)}
		if d.kind == delayDrain {
			explain = append(explain, deregWhy)
		}
		c.add("ZD203", ctr.Name,
			fmt.Sprintf("container %q: %s is not longer than the preStop delay of %s: the kubelet kills the container when the grace period ends (SIGKILL after a 2 s extension), so the application gets no time to finish its requests after SIGTERM", ctr.Name, graceWhy, seconds(d.seconds)),
			fix, explain...)
	}

	c.checkLocalServing(ctr, d, grace, graceWhy)
}

// checkLocalServing is ZD204. With externalTrafficPolicy Local a node only
// forwards to its own pods, and the load balancer keeps sending to the node
// until its health check of the node has failed: the deregistration time,
// counted from the start of termination (kube-proxy's health check fails the
// node as soon as its only local endpoint is terminating). Once the pod stops
// passing its readiness probe — the application fails it after SIGTERM at the
// earliest — the connections still sent to the node are dropped. So the pod
// must keep serving until the load balancer has deregistered the node, or
// until the grace period ends when that comes first (the kubelet kills it
// then anyway: ZD203 and ZD205 are about that). Measuring against the grace
// period, as this rule first did, asked a pod to stay ready long after the
// load balancer had stopped sending to it.
func (c *check) checkLocalServing(ctr *corev1.Container, d delay, grace int64, graceWhy string) {
	svc, local := c.local()
	if !local || ctr.ReadinessProbe == nil || d.kind == delayUnknown {
		return
	}
	p := defaultedProbe(ctr.ReadinessProbe)
	tolerance := float64(p.PeriodSeconds) * float64(p.FailureThreshold-1)
	serving := d.seconds + tolerance
	need := min(float64(c.timing.Deregistration), float64(grace))
	if !(serving < need) {
		return // most pods: nothing to format
	}
	needWhy := fmt.Sprintf("the load balancer's deregistration time of %d s", c.timing.Deregistration)
	if float64(grace) < float64(c.timing.Deregistration) {
		needWhy = fmt.Sprintf("the end of the grace period (%s, before the deregistration time of %d s)", graceWhy, c.timing.Deregistration)
	}
	sNeed, sServing := seconds(need), seconds(serving)
	arith := fmt.Sprintf("preStop %s + readiness periodSeconds %d × (failureThreshold %d − 1) = %s < %s (%s)", seconds(d.seconds), p.PeriodSeconds, p.FailureThreshold, sServing, sNeed, needWhy)
	c.add("ZD204", ctr.Name,
		fmt.Sprintf("container %q: Service %s has externalTrafficPolicy Local and the pod may stop serving %s after termination starts, %s before %s: the node has no other local endpoint for the connections the load balancer still sends it", ctr.Name, svc.ref(), sServing, seconds(need-serving), needWhy),
		fmt.Sprintf("keep the pod ready until the load balancer has deregistered the node: a preStop delay of at least %s, or readiness periodSeconds × (failureThreshold − 1) of at least %s (%[1]s − the preStop delay)", sNeed, seconds(need-d.seconds)),
		arith, "deregistration: "+c.timing.DeregistrationWhy)
}

// checkShortGrace is ZD205: no preStop delay, or a hook of unknown length
// (which the grace period bounds), and a terminationGracePeriodSeconds below
// the deregistration time and below the API default of 30 s. Without a hook the
// application itself must keep serving after SIGTERM until the load balancer
// stops sending, then finish its requests; the kubelet kills it when the
// grace period ends, so a shorter one cuts connections whatever the
// application does, and leaves no room for the preStop delay ZD201 asks for.
// At 0 the kubelet allows only its minimum of 2 s: an error. A grace period of 30 s or
// more (the default, which a cluster returns explicitly) is left to ZD201,
// whose fix sets the grace period above the delay: the rule reads resolved
// values only, so manifests and clusters agree.
func (c *check) checkShortGrace(ctr *corev1.Container, d delay, grace int64, graceWhy string) {
	dereg := c.timing.Deregistration
	if (d.kind != delayNone && d.kind != delayUnknown) || grace >= int64(dereg) || grace >= corev1.DefaultTerminationGracePeriodSeconds {
		return
	}
	sev, what := Warning, fmt.Sprintf("the kubelet kills it %d s after SIGTERM", grace)
	if grace == 0 {
		sev, what = Error, "the kubelet kills it 2 s after SIGTERM (its minimum shutdown window), cutting the requests in flight"
	}
	hook := "has no preStop delay"
	if d.kind == delayUnknown {
		// The grace period counts from the start of the hook: whatever
		// the hook does, the container is killed when it ends.
		hook = fmt.Sprintf("has %s, whose length is unknown but cannot exceed the grace period,", d.what)
		if grace == 0 {
			what = "the kubelet gives the hook and the shutdown after it 2 s together (its minimum shutdown window), cutting the requests in flight"
		} else {
			what = fmt.Sprintf("the kubelet kills it %d s after the hook starts, whatever the hook waits for", grace)
		}
	}
	c.addSeverity(sev, "ZD205", ctr.Name,
		fmt.Sprintf("container %q %s and %s: %s, while the load balancer may route connections to it for up to %d s (its deregistration time), so not even an application that keeps serving after SIGTERM can stop gracefully", ctr.Name, hook, graceWhy, what, dereg),
		fmt.Sprintf("set terminationGracePeriodSeconds above the deregistration time plus shutdown, e.g. %d, with a preStop delay of %d s (ZD201)", dereg+15, dereg),
		"deregistration: "+c.timing.DeregistrationWhy, fmt.Sprintf("%s < %d s, no preStop delay", graceWhy, dereg))
}
