package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Some servers delay their own shutdown: on SIGTERM they keep serving for a
// configured time before they close their listeners. That time counts as a
// pre-stop delay does (the load balancer's connections still find a
// listener), and it adds to a preStop sleep, which runs before SIGTERM. Only
// settings written in the container's command, arguments or literal
// environment are read, and only for the server whose image the container
// runs; each with its source:
//   - agnhost (Kubernetes' e2e test image) netexec, nettest and pause:
//     --delay-shutdown N, "Number of seconds to delay shutdown when
//     receiving SIGTERM" (kubernetes test/images/agnhost, its README and
//     the subcommands' flag definitions).
//   - ingress-nginx's controller: --shutdown-grace-period N, the seconds it
//     waits after the shutdown signal before stopping NGINX (default 0;
//     kubernetes/ingress-nginx#8143, the controller's command-line
//     arguments page).
//   - Traefik: an entry point's transport.lifeCycle.requestAcceptGraceTimeout,
//     how long it keeps accepting requests before its graceful shutdown
//     (traefik/traefik#1971; a duration, a bare number is seconds), as the
//     flag --entryPoints.NAME.transport.lifeCycle.requestAcceptGraceTimeout
//     or the environment variable
//     TRAEFIK_ENTRYPOINTS_NAME_TRANSPORT_LIFECYCLE_REQUESTACCEPTGRACETIMEOUT.
//     With several entry points the shortest counts: the Service's port may
//     be any of them.

// appDelay returns how long the container keeps serving after SIGTERM by its
// own configuration, and what says so; ok is false when nothing does.
func appDelay(ctr *corev1.Container) (float64, string, bool) {
	name, repo := imageName(ctr.Image), imageRepository(ctr.Image)
	if name != "agnhost" && name != "traefik" && !strings.Contains(repo, "ingress-nginx/") {
		return 0, "", false // most containers: nothing to read, nothing to allocate
	}
	args := append(append([]string{}, ctr.Command...), ctr.Args...)
	switch {
	case name == "agnhost":
		if v, flag, ok := flagValue(args, func(n string) bool { return n == "delay-shutdown" }); ok {
			return intSeconds(v, "agnhost "+flag)
		}
	case strings.HasSuffix(repo, "ingress-nginx/controller") || strings.HasSuffix(repo, "ingress-nginx/controller-chroot"):
		if v, flag, ok := flagValue(args, func(n string) bool { return n == "shutdown-grace-period" }); ok {
			return intSeconds(v, "ingress-nginx "+flag)
		}
	case name == "traefik":
		return traefikAcceptGrace(args, literalEnv(ctr))
	}
	return 0, "", false
}

// intSeconds reads a whole number of seconds.
func intSeconds(v, what string) (float64, string, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, "", false
	}
	return float64(n), fmt.Sprintf("%s: it keeps serving %d s after SIGTERM", what, n), true
}

// traefikAcceptGrace reads requestAcceptGraceTimeout from the flags and the
// environment, the shortest of every entry point's.
func traefikAcceptGrace(args []string, env map[string]string) (float64, string, bool) {
	best, what, found := 0.0, "", false
	take := func(v, from string) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			n, nerr := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if nerr != nil || n < 0 {
				return
			}
			d = time.Duration(n * float64(time.Second))
		}
		if d < 0 {
			return
		}
		if !found || d.Seconds() < best {
			best, what, found = d.Seconds(), fmt.Sprintf("traefik %s %s: it keeps accepting requests %s after SIGTERM", from, v, seconds(d.Seconds())), true
		}
	}
	for i, a := range args {
		n, v, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !strings.HasSuffix(strings.ToLower(n), ".transport.lifecycle.requestacceptgracetimeout") {
			continue
		}
		if !eq {
			if i+1 >= len(args) {
				continue
			}
			v = args[i+1]
		}
		take(v, "--"+n)
	}
	for k, v := range env {
		if strings.HasPrefix(k, "TRAEFIK_ENTRYPOINTS_") && strings.HasSuffix(k, "_TRANSPORT_LIFECYCLE_REQUESTACCEPTGRACETIMEOUT") {
			take(v, k)
		}
	}
	return best, what, found
}

// flagValue finds a flag whose name (without dashes) satisfies match, as
// "--flag=v", "-flag=v" or "--flag v", and returns its value and "--flag v".
func flagValue(args []string, match func(string) bool) (string, string, bool) {
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		n, v, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !match(n) {
			continue
		}
		if !eq {
			if i+1 >= len(args) {
				return "", "", false
			}
			v = args[i+1]
		}
		return v, "--" + n + " " + v, true
	}
	return "", "", false
}

// withAppDelay adds the container's own shutdown delay to its preStop delay:
// a preStop sleep runs before SIGTERM, the application's delay after it. A
// hook of unknown length stays unknown, and the drain hook already waits
// for deregistration.
func withAppDelay(ctr *corev1.Container, d delay) delay {
	if d.kind != delayNone && d.kind != delaySleep {
		return d
	}
	s, what, ok := appDelay(ctr)
	if !ok {
		return d
	}
	if d.kind == delayNone {
		return delay{kind: delaySleep, seconds: s, what: "no preStop hook; " + what}
	}
	return delay{kind: delaySleep, seconds: d.seconds + s, what: d.what + " + " + what}
}
