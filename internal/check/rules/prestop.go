package rules

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Names shared with the zerodrop controller and webhook (DESIGN.md).
const (
	// DrainPath is the path of the zerodrop drain hook, a preStop httpGet
	// that returns once every load balancer has drained the pod.
	DrainPath = "/drain"
	// InjectLabel on a namespace makes the zerodrop webhook inject the
	// readiness gate and the drain hook into its pods.
	InjectLabel = "zerodrop.dev/inject"
)

// delayKind says how a container delays its shutdown before SIGTERM.
type delayKind int

const (
	delayNone    delayKind = iota // no preStop hook
	delayUnknown                  // a hook whose duration cannot be known
	delaySleep                    // lifecycle.preStop.sleep or an exec of sleep
	delayDrain                    // the zerodrop drain hook: waits for deregistration
)

// delay is a container's pre-stop delay.
type delay struct {
	kind    delayKind
	seconds float64 // for delaySleep and delayDrain; +Inf for "sleep infinity"
	what    string  // how it was recognised, for messages
}

func (d delay) known() bool { return d.kind == delaySleep || d.kind == delayDrain }

// preStopDelay recognises the container's preStop delay. The drain hook (own
// or injected) waits for the load balancer's deregistration, so its delay is
// dereg seconds.
func preStopDelay(ctr *corev1.Container, dereg int, injected bool) delay {
	var h *corev1.LifecycleHandler
	if ctr.Lifecycle != nil {
		h = ctr.Lifecycle.PreStop
	}
	if h == nil {
		if injected {
			return delay{kind: delayDrain, seconds: float64(dereg),
				what: fmt.Sprintf("the zerodrop drain hook injected by the webhook (namespace label %s=enabled), which waits for deregistration", InjectLabel)}
		}
		return delay{kind: delayNone}
	}
	switch {
	case h.Sleep != nil:
		return delay{kind: delaySleep, seconds: float64(h.Sleep.Seconds),
			what: fmt.Sprintf("lifecycle.preStop.sleep.seconds %d", h.Sleep.Seconds)}
	case h.HTTPGet != nil:
		p, _, _ := strings.Cut(h.HTTPGet.Path, "?")
		if strings.TrimSuffix(p, "/") == DrainPath {
			return delay{kind: delayDrain, seconds: float64(dereg),
				what: "the zerodrop drain hook (preStop httpGet " + DrainPath + "), which waits for deregistration"}
		}
		return delay{kind: delayUnknown, what: fmt.Sprintf("preStop httpGet %s", h.HTTPGet.Path)}
	case h.Exec != nil:
		if s, ok := execSleep(h.Exec.Command); ok {
			return delay{kind: delaySleep, seconds: s,
				what: fmt.Sprintf("preStop exec %q", strings.Join(h.Exec.Command, " "))}
		}
		return delay{kind: delayUnknown, what: fmt.Sprintf("preStop exec %q", strings.Join(h.Exec.Command, " "))}
	case h.TCPSocket != nil:
		return delay{kind: delayUnknown, what: "preStop tcpSocket (not run by the kubelet)"}
	}
	return delay{kind: delayNone}
}

// shells whose "-c" script is read for sleeps.
var shells = map[string]bool{"sh": true, "bash": true, "ash": true, "dash": true, "zsh": true, "ksh": true}

// execSleep recognises `sleep N`, `/bin/sleep N`, `sh -c "sleep N"` and
// scripts of simple commands such as `sleep 5 && nginx -s quit`. It returns
// the total time the command sleeps before it can return.
func execSleep(cmd []string) (float64, bool) {
	if len(cmd) > 0 && path.Base(cmd[0]) == "env" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		return 0, false
	}
	if path.Base(cmd[0]) == "sleep" {
		return sleepArgs(cmd[1:])
	}
	if !shells[path.Base(cmd[0])] {
		return 0, false
	}
	// Find the flag group that holds "c" (-c, -ec, -xc); the script follows.
	for i := 1; i < len(cmd); i++ {
		a := cmd[i]
		if !strings.HasPrefix(a, "-") {
			return 0, false
		}
		if strings.HasPrefix(a, "--") { // --norc, --login
			continue
		}
		if strings.Contains(a[1:], "c") && i+1 < len(cmd) {
			return scriptSleep(cmd[i+1])
		}
	}
	return 0, false
}

// scriptSleep sums the sleeps a shell script certainly runs in sequence.
// A command after "||" may not run and one before "&" or "|" runs in the
// background or concurrently, so those sleeps do not count. Anything it does
// not understand ($VARS, loops) makes the delay unknown only if no sleep is
// found at all: other commands are assumed to take no time.
func scriptSleep(script string) (float64, bool) {
	type seg struct {
		text      string
		prev, sep string // separators before and after
	}
	var segs []seg
	prev, start := "", 0
	for i := 0; i < len(script); i++ {
		sep := ""
		switch {
		case strings.HasPrefix(script[i:], "&&"), strings.HasPrefix(script[i:], "||"):
			sep = script[i : i+2]
		case script[i] == ';', script[i] == '\n', script[i] == '&', script[i] == '|':
			sep = script[i : i+1]
		}
		if sep == "" {
			continue
		}
		segs = append(segs, seg{text: script[start:i], prev: prev, sep: sep})
		prev, start = sep, i+len(sep)
		i += len(sep) - 1
	}
	segs = append(segs, seg{text: script[start:], prev: prev})
	total, found := 0.0, false
	for _, s := range segs {
		if s.prev == "||" || s.prev == "|" || s.sep == "&" || s.sep == "|" {
			continue
		}
		f := strings.Fields(s.text)
		if len(f) > 0 && f[0] == "exec" {
			f = f[1:]
		}
		if len(f) < 2 || path.Base(f[0]) != "sleep" {
			continue
		}
		if n, ok := sleepArgs(f[1:]); ok {
			total += n
			found = true
		}
	}
	return total, found
}

// sleepArgs parses sleep's operands as GNU and busybox sleep do: numbers with
// an optional s, m, h or d suffix, summed; "infinity" sleeps until killed.
func sleepArgs(args []string) (float64, bool) {
	if len(args) == 0 {
		return 0, false
	}
	total := 0.0
	for _, a := range args {
		if a == "infinity" || a == "inf" {
			return math.Inf(1), true
		}
		mult := 1.0
		switch {
		case strings.HasSuffix(a, "s"):
			a = strings.TrimSuffix(a, "s")
		case strings.HasSuffix(a, "m"):
			a, mult = strings.TrimSuffix(a, "m"), 60
		case strings.HasSuffix(a, "h"):
			a, mult = strings.TrimSuffix(a, "h"), 3600
		case strings.HasSuffix(a, "d"):
			a, mult = strings.TrimSuffix(a, "d"), 86400
		}
		n, err := strconv.ParseFloat(a, 64)
		if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
			return 0, false
		}
		total += n * mult
	}
	return total, true
}

// seconds formats a delay for messages.
func seconds(s float64) string {
	if math.IsInf(s, 1) {
		return "infinity"
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}
