package rules

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
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

// preStopDelay recognises the container's pre-stop delay: its preStop hook's,
// plus the shutdown delay the application declares (appdelay.go). The drain
// hook (own or injected) waits for the load balancer's deregistration, so its
// delay is dereg seconds.
func preStopDelay(ctr *corev1.Container, dereg int, injected bool) delay {
	return withAppDelay(ctr, preStopHookDelay(ctr, dereg, injected))
}

// preStopHookDelay is the delay of the preStop hook alone (appdelay.go adds
// the application's own).
func preStopHookDelay(ctr *corev1.Container, dereg int, injected bool) delay {
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
		env := literalEnv(ctr)
		if s, ok := execSleep(h.Exec.Command, env); ok {
			what := fmt.Sprintf("preStop exec %q", strings.Join(h.Exec.Command, " "))
			if used := usedVars(h.Exec.Command, env); len(used) > 0 {
				what += " with " + strings.Join(used, ", ") + " from the container's env"
			}
			return delay{kind: delaySleep, seconds: s, what: what}
		}
		return delay{kind: delayUnknown, what: fmt.Sprintf("preStop exec %q", strings.Join(h.Exec.Command, " "))}
	case h.TCPSocket != nil:
		return delay{kind: delayUnknown, what: "preStop tcpSocket (not run by the kubelet)"}
	}
	return delay{kind: delayNone}
}

// shells whose "-c" script is read for sleeps.
var shells = map[string]bool{"sh": true, "bash": true, "ash": true, "dash": true, "zsh": true, "ksh": true}

// literalEnv returns the container's environment variables whose value is
// written in the manifest: those are what a preStop shell script sees. A
// value from a ConfigMap, a Secret or the downward API, or one that refers to
// another variable ($(VAR)), is left out: it is unknown here.
func literalEnv(ctr *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil || strings.Contains(e.Value, "$(") {
			delete(env, e.Name) // the last definition wins
			continue
		}
		env[e.Name] = e.Value
	}
	return env
}

// usedVars lists, as NAME=value, the variables of env that a shell command
// refers to, for messages.
func usedVars(cmd []string, env map[string]string) []string {
	joined := strings.Join(cmd, " ")
	var out []string
	for name, v := range env {
		if strings.Contains(joined, "$"+name) || strings.Contains(joined, "${"+name+"}") {
			out = append(out, name+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// execSleep recognises `sleep N`, `/bin/sleep N`, `sh -c "sleep N"` and
// scripts of simple commands such as `sleep 5 && nginx -s quit`. It returns
// the total time the command sleeps before it can return. A shell script's
// `sleep $VAR` (or "${VAR}") takes VAR from env; without a shell nothing
// expands (the kubelet runs the command as written).
func execSleep(cmd []string, env map[string]string) (float64, bool) {
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
			return scriptSleep(cmd[i+1], env)
		}
	}
	return 0, false
}

// scriptSleep sums the sleeps a shell script certainly runs in sequence.
// A command after "||" may not run and one before "&" or "|" runs in the
// background or concurrently, so those sleeps do not count. Anything it does
// not understand ($VARS) makes the delay unknown only if no sleep is found
// at all: other commands are assumed to take no time. A loop makes it
// unknown whatever its sleeps. Operands are
// unquoted, and $VAR or ${VAR} (outside single quotes) replaced from env.
func scriptSleep(script string, env map[string]string) (float64, bool) {
	if shellLoop.MatchString(script) {
		// A drain loop (`while [ connections ]; do sleep 1; done`) waits
		// for a condition: its sleeps are a poll interval, not a fixed
		// delay, and how long it runs is unknown here.
		return 0, false
	}
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
		args := make([]string, len(f)-1)
		for i, a := range f[1:] {
			args[i] = shellWord(a, env)
		}
		if n, ok := sleepArgs(args); ok {
			total += n
			found = true
		}
	}
	return total, found
}

// shellLoop matches a while, until or for loop of a shell script.
var shellLoop = regexp.MustCompile(`(?:^|[;&|\n(]|\bthen|\bdo|\belse)\s*(?:while|until|for)\s[\s\S]*\bdo\b`)

// varRef matches a whole-word variable reference: $NAME or ${NAME}.
var varRef = regexp.MustCompile(`^\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})$`)

// shellWord unquotes one word of a simple command and expands a variable
// that makes up the whole word; anything else is returned as written (and
// then fails to parse as a number).
func shellWord(w string, env map[string]string) string {
	if len(w) >= 2 && w[0] == '\'' && w[len(w)-1] == '\'' {
		return w[1 : len(w)-1] // no expansion in single quotes
	}
	if len(w) >= 2 && w[0] == '"' && w[len(w)-1] == '"' {
		w = w[1 : len(w)-1]
	}
	if m := varRef.FindStringSubmatch(w); m != nil {
		if v, ok := env[m[1]+m[2]]; ok {
			return strings.TrimSpace(v)
		}
	}
	return w
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
