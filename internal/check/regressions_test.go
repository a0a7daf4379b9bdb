package check_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRegressions runs each manifest of testdata/regressions, minimal cases of
// the false findings and misses found on real manifests (issue 38). Each file
// says in its leading comments what it expects:
//
//	# provider: aws
//	# present: ZD101 Deployment/default/web "web"
//	# absent: ZD101 Deployment/default/web "proxy"
//
// present findings must be reported and absent ones must not; others may be.
func TestRegressions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "regressions", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no regression manifests")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			provider := "generic"
			var present, absent []string
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				line := sc.Text()
				if !strings.HasPrefix(line, "#") {
					break
				}
				key, val, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
				val = strings.TrimSpace(val)
				switch {
				case !ok:
				case key == "provider":
					provider = val
				case key == "present":
					present = append(present, val)
				case key == "absent":
					absent = append(absent, val)
				}
			}
			if len(present)+len(absent) == 0 {
				t.Fatal("the file states no present: or absent: finding")
			}
			r := run(t, "", "-o", "json", "--provider", provider, file)
			if r.code == 2 || r.stderr != "" {
				t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
			}
			got := map[string]string{}
			for _, f := range decodeFindings(t, r.stdout) {
				got[findingKey(f["rule"], f["object"], f["container"])] = f["message"].(string)
			}
			for _, k := range present {
				if _, ok := got[k]; !ok {
					t.Errorf("missing: %s", k)
				}
			}
			for _, k := range absent {
				if msg, ok := got[k]; ok {
					t.Errorf("reported: %s: %s", k, msg)
				}
			}
		})
	}
}
