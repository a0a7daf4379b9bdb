//go:build !lab

package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestProductionBuildHasNoLab: the binary a cluster runs links none of the
// lab's machinery (the test control plane, network namespaces, the Azure
// emulator), nor the API server's library (controller-runtime's metrics
// filters would bring it in: 30 MB), nor the image builder, and its `lab`
// command says how to get the development build.
func TestProductionBuildHasNoLab(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"lab"}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "-tags lab") {
		t.Errorf("zerodrop lab in the production build: exit %d, %q; want 2 and how to get the lab", code, stderr.String())
	}
	out, err := exec.Command("go", "list", "-deps", "zerodrop.dev/zerodrop/cmd/zerodrop").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"sigs.k8s.io/controller-runtime/pkg/envtest",
			"zerodrop.dev/zerodrop/internal/lab",
			"zerodrop.dev/zerodrop/internal/controlplane",
			"zerodrop.dev/zerodrop/internal/testutil",
			"zerodrop.dev/zerodrop/internal/emulated/azurearm",
			"k8s.io/apiserver",
			"github.com/google/go-containerregistry",
			"testing",
		} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("the production binary links %s", dep)
			}
		}
	}
}
