package controlplane

import (
	"fmt"
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
		if helmBin, helmErr = Build("helm.sh"); helmErr != nil {
			helmErr = fmt.Errorf("build helm: %w", helmErr)
		}
	})
	return helmBin, helmErr
}
