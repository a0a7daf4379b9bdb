package rules

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Two containers of a pod that must stop in order: the container the load
// balancer reaches forwards each request to another container of the same
// pod on localhost (a proxy such as Cloud Endpoints' ESP in front of the
// server). The kubelet runs every regular container's preStop hook and sends
// SIGTERM to all of them at the same time (only native sidecars are stopped
// after the others), so the backend must keep serving longer than the
// container in front of it: until the load balancer has deregistered the pod,
// and past the front's own pre-stop delay, while the front finishes the
// requests it has forwarded. Equal delays are not enough: the requests in
// flight when both get SIGTERM fail.
//
// The forwarding is read from the front container's command, arguments and
// literal environment: an address on localhost, 127.0.0.1 or [::1] whose
// port another regular container of the pod declares.

// localAddr matches a loopback address with a port.
var localAddr = regexp.MustCompile(`(?:localhost|127\.0\.0\.1|\[::1\]):(\d{1,5})\b`)

// checkStopOrder is ZD208, for a serving container front.
// reported holds the backends already reported, allocated on the first.
func (c *check) checkStopOrder(front *corev1.Container, reported *map[string]bool) {
	if len(c.w.tmpl.Spec.Containers) < 2 {
		return // most pods: no sibling to forward to
	}
	ports := forwardedPorts(front)
	if len(ports) == 0 {
		return
	}
	dereg := c.timing.Deregistration
	injected := c.nsLabels[InjectLabel] == "enabled"
	fd := preStopDelay(front, dereg, injected)
	if fd.kind == delayUnknown {
		return // the front's stop is unknown: so is the order
	}
	grace, graceWhy := c.gracePeriod()
	need, needWhy := float64(dereg), fmt.Sprintf("the load balancer's deregistration time of %d s", dereg)
	if float64(grace) < need {
		need, needWhy = float64(grace), graceWhy
	}
	for i := range c.w.tmpl.Spec.Containers {
		back := &c.w.tmpl.Spec.Containers[i]
		if back.Name == front.Name || (*reported)[back.Name] {
			continue
		}
		port, ok := declaresAny(back, ports)
		if !ok {
			continue
		}
		if _, sql := c.cloudSQLProxy(back); sql {
			continue // ZD206 holds a Cloud SQL proxy's stop, with what keeps it up
		}
		bd := preStopDelay(back, dereg, injected)
		if bd.kind == delayUnknown || (bd.seconds > fd.seconds && bd.seconds >= need) {
			continue
		}
		if *reported == nil {
			*reported = map[string]bool{}
		}
		(*reported)[back.Name] = true
		backWhy := "no pre-stop delay"
		if bd.kind != delayNone {
			backWhy = bd.what
		}
		frontWhy := "no pre-stop delay"
		if fd.kind != delayNone {
			frontWhy = fd.what
		}
		when := "at the same time as"
		if bd.seconds < fd.seconds {
			when = "before"
		}
		target := math.Max(fd.seconds, need) + 10
		c.add("ZD208", back.Name,
			fmt.Sprintf("container %q receives the requests container %q forwards to localhost:%d, and gets SIGTERM %s after the pod starts terminating (%s), %s %q (%s: %s): the requests %q has in flight, and those the load balancer still sends it for %s, fail when %q stops first",
				back.Name, front.Name, port, seconds(bd.seconds), backWhy, when, front.Name, seconds(fd.seconds), frontWhy, front.Name, seconds(need), back.Name),
			fmt.Sprintf("make %q stop after %q: a preStop sleep of about %s on %q (longer than %q's pre-stop delay and the deregistration time, plus the time its requests take), with terminationGracePeriodSeconds above it", back.Name, front.Name, seconds(target), back.Name, front.Name),
			fmt.Sprintf("%s stops at %s; %s stops at %s; needed: after both %s and %s (%s)", back.Name, seconds(bd.seconds), front.Name, seconds(fd.seconds), seconds(fd.seconds), seconds(need), needWhy),
			"deregistration: "+c.timing.DeregistrationWhy)
	}
}

// forwardedPorts returns the loopback ports the container's command,
// arguments and literal environment name.
func forwardedPorts(ctr *corev1.Container) map[int32]bool {
	var out map[int32]bool
	scan := func(s string) {
		if !strings.Contains(s, "localhost:") && !strings.Contains(s, "127.0.0.1:") && !strings.Contains(s, "[::1]:") {
			return
		}
		for _, m := range localAddr.FindAllStringSubmatch(s, -1) {
			if p, err := strconv.Atoi(m[1]); err == nil && p > 0 && p < 65536 {
				if out == nil {
					out = map[int32]bool{}
				}
				out[int32(p)] = true
			}
		}
	}
	for _, s := range ctr.Command {
		scan(s)
	}
	for _, s := range ctr.Args {
		scan(s)
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			scan(e.Value)
		}
	}
	return out
}

// declaresAny returns the first of ports the container declares.
func declaresAny(ctr *corev1.Container, ports map[int32]bool) (int32, bool) {
	for _, p := range ctr.Ports {
		if ports[p.ContainerPort] {
			return p.ContainerPort, true
		}
	}
	return 0, false
}
