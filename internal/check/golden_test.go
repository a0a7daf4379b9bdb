package check_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGolden(t *testing.T) {
	const input = "testdata/golden/input.yaml"
	tests := []struct {
		golden string
		args   []string
		code   int
	}{
		{"text.golden", []string{input}, 1},
		{"text-explain.golden", []string{"--explain", input}, 1},
		{"text-azure.golden", []string{"--provider", "azure", input}, 1},
		{"json.golden", []string{"-o", "json", input}, 1},
		{"sarif.golden", []string{"-o", "sarif", input}, 1},
		{"text-clean.golden", []string{"--provider", "azure", "testdata/realistic/well-configured.yaml"}, 0},
		{"json-clean.golden", []string{"-o", "json", "--provider", "azure", "testdata/realistic/well-configured.yaml"}, 0},
		{"sarif-clean.golden", []string{"-o", "sarif", "--provider", "azure", "testdata/realistic/well-configured.yaml"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, "", tc.args...)
			if r.code != tc.code || r.stderr != "" {
				t.Fatalf("exit %d (want %d), stderr:\n%s", r.code, tc.code, r.stderr)
			}
			golden(t, tc.golden, r.stdout)
		})
	}
}
