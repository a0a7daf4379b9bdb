package upstream

import (
	"os/exec"
	"strings"
	"testing"
)

// forbiddenImports are zerodrop's load-balancer model and providers: the
// baseline must not be built on the system it is compared with.
var forbiddenImports = []string{
	"zerodrop.dev/zerodrop/internal/model",
	"zerodrop.dev/zerodrop/internal/provider",
}

// TestNoZerodropModelOrProvider: neither the package nor its tests depend,
// directly or not, on zerodrop's model or any of its providers (go list
// -deps, with and without the test files).
func TestNoZerodropModelOrProvider(t *testing.T) {
	for _, args := range [][]string{
		{"list", "-deps", "zerodrop.dev/zerodrop/internal/lab/upstream"},
		{"list", "-deps", "-test", "zerodrop.dev/zerodrop/internal/lab/upstream"},
	} {
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go %s listed %d packages: %q", strings.Join(args, " "), len(deps), out)
		}
		for _, dep := range deps {
			// -test lists a package built for a test as "p [q.test]".
			dep = strings.Trim(dep, "[]")
			for _, bad := range forbiddenImports {
				if dep == bad || strings.HasPrefix(dep, bad+"/") {
					t.Errorf("go %s: the upstream cloud depends on %s", strings.Join(args, " "), dep)
				}
			}
		}
	}
}
