package rules

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A container's first process is PID 1 of its PID namespace, and the kernel
// gives PID 1 no default action for SIGTERM: it stops only if it installed a
// handler. A shell started with -c that does not exec the server stays PID 1
// with the server as its child; a non-interactive shell installs no SIGTERM
// handler and passes no signal on to the child it waits for. Docker's
// reference says the same of the shell form of ENTRYPOINT: the executable
// "will not be the container's PID 1 - and will not receive Unix signals"
// (https://docs.docker.com/reference/dockerfile/#entrypoint). The kubelet's
// SIGTERM therefore never reaches the server: it keeps serving until the
// grace period ends and the kubelet sends SIGKILL, which cuts every request
// in flight, and a preStop delay changes nothing but the wait.
//
// A -c string that is one simple command is exec'd by bash and dash without a
// fork (bash also the last simple command of a list), `exec server` replaces
// the shell, and a script with `trap` handles the signal itself. What is
// reported is a script whose last command keeps the shell the parent for
// sure — a compound command (if … fi, case … esac, a loop, a { } group or a
// ( ) subshell) or `wait` for a server started in the background — with no
// exec and no trap anywhere.

// checkSignalForwarding is ZD207.
func (c *check) checkSignalForwarding(ctr *corev1.Container) {
	shell, script, ok := shellScript(ctr.Command, ctr.Args)
	if !ok {
		return
	}
	how, ok := shellKeepsPID1(script)
	if !ok {
		return
	}
	grace, graceWhy := c.gracePeriod()
	c.add("ZD207", ctr.Name,
		fmt.Sprintf("container %q runs %s -c with the server %s and no exec: the shell stays PID 1, which ignores SIGTERM and does not forward it, so the server never gets SIGTERM: every deletion waits the whole grace period (%d s) and ends in SIGKILL, cutting the requests in flight, and a preStop delay changes nothing", ctr.Name, shell, how, grace),
		"start the server with exec (`exec server …` as the script's last command, in each branch of an if), or run it under an init that forwards signals (tini, dumb-init), or trap TERM and pass it on",
		"PID 1 has no default action for SIGTERM; "+graceWhy)
}

// shellScript returns the shell and its -c script when the container's
// command runs one ("sh -c", "/bin/bash -ec"). Without a command the image's
// entrypoint runs, which the manifest does not show.
func shellScript(command, args []string) (string, string, bool) {
	if len(command) == 0 || !shells[path.Base(command[0])] {
		return "", "", false
	}
	// The words after the shell, command then args, read in place.
	n := len(command) + len(args)
	word := func(i int) string {
		if i < len(command) {
			return command[i]
		}
		return args[i-len(command)]
	}
	for i := 1; i < n; i++ {
		a := word(i)
		if !strings.HasPrefix(a, "-") {
			return "", "", false
		}
		if !strings.HasPrefix(a, "--") && strings.Contains(a[1:], "c") && i+1 < n {
			return path.Base(command[0]), word(i + 1), true
		}
	}
	return "", "", false
}

// Words of the script: exec, trap and wait as commands.
var (
	execWord = regexp.MustCompile(`(?:^|[\s;&|({])exec\s`)
	trapWord = regexp.MustCompile(`(?:^|[\s;&|({])trap\s`)
	lastWait = regexp.MustCompile(`(?:^|[\s;&|])wait(?:\s+["']?\$[!{A-Za-z_][^;&|]*)?$`)
	lastWord = regexp.MustCompile(`(?:^|[\s;&|])(fi|done|esac|\}|\))$`)
)

// shellKeepsPID1 says how the script keeps the shell as the server's parent,
// or ok false when it may not.
func shellKeepsPID1(script string) (string, bool) {
	if execWord.MatchString(script) || trapWord.MatchString(script) {
		return "", false
	}
	end := strings.TrimRight(script, " \t\r\n;")
	if m := lastWord.FindStringSubmatch(end); m != nil {
		what := map[string]string{"fi": "if … fi", "done": "a loop", "esac": "case … esac", "}": "a { } group", ")": "a ( ) subshell"}[m[1]]
		return "inside " + what + " (a compound command, which the shell does not exec)", true
	}
	if background(end) && lastWait.MatchString(end) {
		return "in the background, waited for with wait", true
	}
	return "", false
}

// background reports whether the script puts a command in the background: an
// "&" that is not part of "&&", ">&" or "&>".
func background(script string) bool {
	for i := 0; i < len(script); i++ {
		if script[i] != '&' {
			continue
		}
		if i+1 < len(script) && (script[i+1] == '&' || script[i+1] == '>') {
			i++
			continue
		}
		if i > 0 && (script[i-1] == '>' || script[i-1] == '<') {
			continue
		}
		return true
	}
	return false
}
