package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestK8sVersionIsTheScripts: the release K8sVersion names by default is
// the one hack/control-plane.sh builds by default, so that what the lab
// reports of its control plane is what ran.
func TestK8sVersionIsTheScripts(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "control-plane.sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := `K8S_VERSION="${ZERODROP_K8S_VERSION:-` + DefaultK8sVersion + `}"`
	if !strings.Contains(string(script), want) {
		t.Errorf("hack/control-plane.sh does not default to %s (want the line %s)", DefaultK8sVersion, want)
	}
	t.Setenv("ZERODROP_K8S_VERSION", "v1.33.2")
	if got := K8sVersion(); got != "v1.33.2" {
		t.Errorf("K8sVersion() with ZERODROP_K8S_VERSION=v1.33.2 = %s", got)
	}
}
