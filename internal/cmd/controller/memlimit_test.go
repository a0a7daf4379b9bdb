package controller

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// TestMemoryLimitFromCgroup: the Go runtime's soft memory limit is set to
// 85 % of the container's memory limit, read from a cgroup tree (v2
// memory.max, v1 memory/memory.limit_in_bytes), and left alone when there is
// no limit or when GOMEMLIMIT is set in the environment: the user's choice
// wins. One line says what was done.
func TestMemoryLimitFromCgroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string // path under the cgroup root → content
		env    string            // GOMEMLIMIT; "" leaves it unset
		want   int64             // the runtime's limit afterwards; 0: unchanged
		logged string            // in the one line logged
	}{
		{name: "v2 limit", files: map[string]string{"memory.max": "268435456\n"}, want: 228170137, logged: "228170137"},
		{name: "v2 max", files: map[string]string{"memory.max": "max\n"}, logged: "no container memory limit"},
		{name: "v1 limit", files: map[string]string{"memory/memory.limit_in_bytes": "268435456\n"}, want: 228170137, logged: "228170137"},
		{name: "v1 unlimited", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, logged: "no container memory limit"},
		{name: "absent", logged: "no container memory limit"},
		{name: "GOMEMLIMIT set", files: map[string]string{"memory.max": "268435456\n"}, env: "1GiB", logged: "GOMEMLIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, content := range tc.files {
				path := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
			} else if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
				t.Setenv("GOMEMLIMIT", v) // restored afterwards
				os.Unsetenv("GOMEMLIMIT")
			}
			// A known limit before, and the process's own back afterwards.
			const before = math.MaxInt64 - 1
			orig := debug.SetMemoryLimit(before)
			t.Cleanup(func() { debug.SetMemoryLimit(orig) })

			var lines []string
			log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
			setMemoryLimit(log, root)

			want := tc.want
			if want == 0 {
				want = before
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("memory limit %d after setMemoryLimit, want %d", got, want)
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.logged) {
				t.Errorf("logged %q, want one line with %q", lines, tc.logged)
			}
		})
	}
}
