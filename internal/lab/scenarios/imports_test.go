package scenarios

import (
	"os/exec"
	"strings"
	"testing"
)

// worldPackages are the worlds' packages and what only a world uses: the
// runner reaches a world through package world only, so a new world is a
// new package and the runner never learns a cloud.
var worldPackages = []string{
	"zerodrop.dev/zerodrop/internal/lab/worlds",
	"zerodrop.dev/zerodrop/internal/lab/azuredp",
	"zerodrop.dev/zerodrop/internal/lab/ccm",
	"zerodrop.dev/zerodrop/internal/emulated",
	"zerodrop.dev/zerodrop/internal/install",
	"zerodrop.dev/zerodrop/internal/provider/azure",
}

// TestScenariosImportNoWorld: the runner and its tests depend on no world
// package, directly or not (go list -deps, with and without the test
// files).
func TestScenariosImportNoWorld(t *testing.T) {
	for _, args := range [][]string{
		{"list", "-deps", "zerodrop.dev/zerodrop/internal/lab/scenarios"},
		{"list", "-deps", "-test", "zerodrop.dev/zerodrop/internal/lab/scenarios"},
	} {
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		deps := strings.Fields(string(out))
		if !containsDep(deps, "zerodrop.dev/zerodrop/internal/lab/world") {
			t.Fatalf("go %s does not list package world: %q", strings.Join(args, " "), out)
		}
		for _, dep := range deps {
			// -test lists a package built for a test as "p [q.test]".
			dep = strings.Trim(dep, "[]")
			for _, bad := range worldPackages {
				if dep == bad || strings.HasPrefix(dep, bad+"/") {
					t.Errorf("go %s: the runner depends on %s", strings.Join(args, " "), dep)
				}
			}
		}
	}
}

func containsDep(deps []string, p string) bool {
	for _, d := range deps {
		if strings.Trim(d, "[]") == p {
			return true
		}
	}
	return false
}
