// Command zerodrop is the load-balancer controller and toolkit that keeps
// Services of type LoadBalancer from dropping traffic. Subcommands live in
// internal packages; this file only dispatches.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"zerodrop.dev/zerodrop/internal/check"
	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/cmd/haproxyrun"
	"zerodrop.dev/zerodrop/internal/cmd/speaker"
	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/probe"
	"zerodrop.dev/zerodrop/internal/version"
)

const usage = `usage: zerodrop <command> [flags]

commands:
  controller   run the Service LoadBalancer controller
  check        analyze manifests or a live cluster for rollout safety
  drain-relay  the drain hook's sidecar in application pods (injected by the webhook)
  haproxy      a data-plane replica's HAProxy container: prepare its state directory, then run HAProxy
  speaker      a data-plane node's BGP speaker: announce the Service addresses its HAProxy serves (one per node, not in the data-plane pod)
  probe        an exec probe: ask a controller's probe socket (--health-probe-socket) for /healthz or /readyz
  lab          real rollouts under real traffic: the upstream controller, the recipe and zerodrop
               (development build only: make lab, or go run -tags lab ./cmd/zerodrop lab)
  version      print the version

Run 'zerodrop <command> -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "controller":
		return controller.Run(ctx, args[1:], stdout, stderr)
	case "check":
		return check.Run(ctx, args[1:], stdin, stdout, stderr)
	case "drain-relay":
		return drainrelay.Run(ctx, args[1:], stderr)
	case "haproxy":
		return haproxyrun.Run(args[1:], stderr)
	case "probe":
		return probe.Run(ctx, args[1:], stdout, stderr)
	case "speaker":
		return speaker.Run(ctx, args[1:], stdout, stderr)
	case "lab":
		return runLab(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "zerodrop", version.String())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "zerodrop: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
