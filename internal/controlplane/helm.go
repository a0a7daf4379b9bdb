package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// Helm builds (or reuses from the cache) the real helm v3 CLI with
// hack/helm.sh and returns the path of the binary. The distribution has no
// helm package, so tests get it from the Go module proxy like the control plane.
func Helm() (string, error) {
	helmOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			helmErr = err
			return
		}
		out, err := supervisor.Output(context.Background(), supervisor.Command{Name: "bash", Args: []string{filepath.Join(root, "hack", "helm.sh")}})
		if err != nil {
			helmErr = fmt.Errorf("build helm: %w", err)
			return
		}
		helmBin = strings.TrimSpace(string(out))
	})
	return helmBin, helmErr
}
