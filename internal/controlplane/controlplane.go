// Package controlplane starts a real control plane (kube-apiserver + etcd,
// built by hack/control-plane.sh and cached) through controller-runtime's
// envtest, and builds helm the same way. It is not test-only code: the lab
// binary, the demo and the benches link it as well as the integration tests.
// There is no skip: a test that needs the apiserver fails when it cannot be
// built or started.
package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// RepoRoot returns the module root, found by walking up from the working
// directory (go test runs each package in its own directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack", "control-plane.sh")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no zerodrop module root above the working directory")
		}
		dir = parent
	}
}

// Assets builds (or reuses from the cache) the control-plane binaries.
// which is "apiserver" (kube-apiserver + etcd) or "all" (plus kube-controller-manager).
func Assets(which string) (string, error) {
	if which == "apiserver" {
		assetsOnce.Do(func() { assetsDir, assetsErr = runControlPlaneScript(which) })
		return assetsDir, assetsErr
	}
	return runControlPlaneScript(which)
}

func runControlPlaneScript(which string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" && which == "apiserver" {
		return dir, nil
	}
	dir, err := Build("control-plane.sh", which)
	if err != nil {
		return "", fmt.Errorf("build control plane: %w", err)
	}
	return dir, nil
}

// DefaultK8sVersion is the Kubernetes release hack/control-plane.sh builds
// when ZERODROP_K8S_VERSION names none (TestK8sVersionIsTheScripts keeps
// the two the same).
const DefaultK8sVersion = "v1.37.2"

// K8sVersion is the Kubernetes release of the control plane that
// hack/control-plane.sh builds for this process: ZERODROP_K8S_VERSION's,
// else DefaultK8sVersion.
func K8sVersion() string {
	if v := os.Getenv("ZERODROP_K8S_VERSION"); v != "" {
		return v
	}
	return DefaultK8sVersion
}

// Build runs the build script hack/<script> with args and returns the path
// it prints: what it built, or found in the cache (hack/lib/cache.sh: the
// cache directory, and a lock so that two processes do not build the same
// thing at once). Each binary a test or the lab runs from the Go module
// proxy is built this way, on demand, by what runs it. The script's
// progress, which it prints on stderr only while it builds (minutes on a
// cold cache), is shown on this process' stderr.
func Build(script string, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := supervisor.OutputLogging(context.Background(), supervisor.Command{
		Name: "bash", Args: append([]string{filepath.Join(root, "hack", script)}, args...)}, os.Stderr)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// Env is a running control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
}

// Run starts kube-apiserver + etcd outside of a test (the demo and the lab);
// the caller stops the returned environment. Its service range is a /16:
// envtest's default /24 is too small for benchmarks with a thousand Services.
func Run() (*Env, error) { return RunServiceRange(defaultServiceRange) }

// defaultServiceRange is the service CIDR of Run and StartEnv.
const defaultServiceRange = "10.0.0.0/16"

// StartEnvServiceRange is StartEnv with the given service CIDR, for
// manifests that set a Service's clusterIP from a cluster's usual range.
func StartEnvServiceRange(t testing.TB, cidr string) *Env {
	t.Helper()
	env, err := RunServiceRange(cidr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	return env
}

// RunServiceRange is Run with the given service CIDR.
func RunServiceRange(cidr string) (*Env, error) { return RunWithFlags(cidr, nil) }

// RunWithFlags is RunServiceRange with more kube-apiserver flags (name
// without the dashes → value).
func RunWithFlags(cidr string, flags map[string]string) (*Env, error) {
	dir, err := Assets("apiserver")
	if err != nil {
		return nil, fmt.Errorf("control plane assets: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("service-cluster-ip-range", cidr)
	for k, v := range flags {
		args.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	return &Env{Environment: env, Config: cfg}, nil
}

// StartEnv starts kube-apiserver + etcd and stops them when the test ends.
func StartEnv(t testing.TB) *Env {
	t.Helper()
	return StartEnvServiceRange(t, defaultServiceRange)
}

// Start starts kube-apiserver + etcd and returns an admin rest.Config.
func Start(t testing.TB) *rest.Config {
	t.Helper()
	return StartEnv(t).Config
}
