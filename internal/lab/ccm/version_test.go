package ccm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// The release reaches the build script as an argument, and the script
// takes only a release tag: anything else (a path, a shell word) is refused
// before anything is fetched or built. The script runs with a PATH of bash
// and dirname only, and an empty cache: one that let a version through
// would stop at "go is required", not at the refusal, and build nothing.
func TestBinaryVersionRefusesANonTag(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"bash", "dirname"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	t.Setenv("ZERODROP_CACHE", t.TempDir())
	for name, build := range map[string]func(string) (string, error){"BinaryVersion": ccm.BinaryVersion, "AWSBinary": ccm.AWSBinary} {
		for _, v := range []string{"latest", "v1.33", "v1.33.2/../x", "v1.33.2 x"} {
			if got, err := build(v); err == nil || !strings.Contains(err.Error(), "is not a release tag") {
				t.Errorf("%s(%q) = %q, %v; want it refused as not a release tag", name, v, got, err)
			}
		}
	}
}
