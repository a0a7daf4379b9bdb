package controlplane

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
		cmd := exec.Command("bash", filepath.Join(root, "hack", "helm.sh"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("build helm: %w\n%s", err, stderr.String())
			return
		}
		helmBin = strings.TrimSpace(stdout.String())
	})
	return helmBin, helmErr
}
