// Package controllerpod runs zerodrop's controller as the emulated clouds'
// worlds' controller pods do. It lives outside package world because it
// links the controller and every provider, which the scenario runner must
// not (TestScenariosImportNoWorld).
package controllerpod

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
)

// Run runs zerodrop's controller with cfg, logging to stderr,
// until SIGINT or SIGTERM, as the lab's controller pods of the emulated
// clouds do once their environment is set; name prefixes its error. It
// returns the process' exit code (1 when the controller failed).
func Run(name string, cfg controller.Config, stderr io.Writer) int {
	cfg.LogOutput = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := controller.RunConfig(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
