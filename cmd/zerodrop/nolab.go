//go:build !lab

package main

import (
	"context"
	"fmt"
	"io"
)

// runLab in the production build says where the lab is: it links the test
// control plane, network namespaces and the Azure emulator, which have no
// place in the binary a cluster runs.
func runLab(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "zerodrop lab is not in this build: it is part of the development build. From the repository: make lab, or go run -tags lab ./cmd/zerodrop lab [flags]")
	return 2
}
