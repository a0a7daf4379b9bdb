//go:build lab

package main

import (
	"context"
	"io"

	"zerodrop.dev/zerodrop/internal/lab"
)

// runLab is `zerodrop lab` in the development build (`-tags lab`, what `make
// lab` builds): the lab links the test control plane (envtest), the network
// namespaces and the Azure emulator, which the production binary leaves out.
func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return lab.Run(ctx, args, stdout, stderr)
}
