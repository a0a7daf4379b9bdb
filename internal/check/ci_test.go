package check_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

// stream is a Service and the Deployment it selects: ZD101 and ZD201 are
// errors, ZD301/ZD303/ZD304 warnings.
const stream = lbService + "---\n" + web

func TestDisableAndFailOnFlags(t *testing.T) {
	r := run(t, stream, "-o", "json", "--disable", "ZD101,ZD201", "--disable", "zd303", "-")
	fs := decodeFindings(t, r.stdout)
	for _, rule := range []string{"ZD101", "ZD201", "ZD303"} {
		if countRule(fs, rule) != 0 {
			t.Errorf("%s reported although disabled", rule)
		}
	}
	if r.code != check.ExitOK || countRule(fs, "ZD304") != 1 {
		t.Errorf("exit %d (want 0: no error left), findings %v", r.code, fs)
	}
	if r := run(t, stream, "--disable", "ZD101,ZD201", "--fail-on", "warning", "-"); r.code != check.ExitFindings {
		t.Errorf("--fail-on warning with warnings: exit %d", r.code)
	}
	if r := run(t, stream, "--fail-on", "none", "-"); r.code != check.ExitOK {
		t.Errorf("--fail-on none with errors: exit %d", r.code)
	}
	for _, args := range [][]string{{"--fail-on", "info"}, {"--disable", "ZD999"}} {
		if r := run(t, stream, append(args, "-")...); r.code != check.ExitUsage || r.stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := "# CI settings\ndisable: [ZD101, ZD201]\nenable: [ZD201]\nfailOn: warning\nproviders:\n  azure: {registrationSeconds: 4, deregistrationSeconds: 7}\n"
	if err := os.WriteFile(".zerodrop.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, stream, "-o", "json", "--provider", "azure", "-")
	fs := decodeFindings(t, r.stdout)
	if countRule(fs, "ZD101") != 0 || countRule(fs, "ZD201") != 1 {
		t.Errorf("disable ZD101 and ZD201, enable ZD201: %v", fs)
	}
	for _, f := range fs {
		if f["rule"] == "ZD201" && !strings.Contains(f["message"].(string), "up to 7 s") {
			t.Errorf("the config's azure deregistration of 7 s not applied: %s", f["message"])
		}
	}
	if r.code != check.ExitFindings {
		t.Errorf("exit %d", r.code)
	}
	// Flags win over the file.
	if r := run(t, stream, "--fail-on", "none", "-"); r.code != check.ExitOK {
		t.Errorf("--fail-on none over failOn warning: exit %d", r.code)
	}

	other := filepath.Join(t.TempDir(), "ci.yaml")
	if err := os.WriteFile(other, []byte("failOn: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, stream, "--config", other, "-"); r.code != check.ExitOK {
		t.Errorf("--config with failOn none: exit %d, stderr %s", r.code, r.stderr)
	}

	for _, tc := range []struct{ data, want string }{
		{"disable: [ZD101]\nfailon: warning\n", ":2: "},
		{"disable:\n- ZD101\n- ZD999\n", `:3: unknown rule "ZD999"`},
		{"failOn: sometimes\n", `:1: failOn`},
		{"providers:\n  azure: {registrationSeconds: -1}\n", ":2: "},
		{"providers:\n  digitalocean: {registrationSeconds: 1}\n", `:2: unknown provider "digitalocean"`},
	} {
		if err := os.WriteFile(other, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, stream, "--config", other, "-")
		if r.code != check.ExitUsage || !strings.Contains(r.stderr, other+tc.want) {
			t.Errorf("config %q: exit %d, stderr %q, want %q", tc.data, r.code, r.stderr, other+tc.want)
		}
	}
	if r := run(t, stream, "--config", filepath.Join(dir, "missing.yaml"), "-"); r.code != check.ExitUsage {
		t.Errorf("missing --config file: exit %d", r.code)
	}
}

// A suppression needs a reason: it then hides the finding, which is counted
// as suppressed and carried in SARIF with its justification; without a
// reason the finding stays and stderr says why.
func TestSuppressionNeedsReason(t *testing.T) {
	annotated := strings.Replace(web, "metadata: {name: web}",
		"metadata: {name: web, annotations: {zerodrop.dev/ignore: 'ZD101: probed by the mesh sidecar; ZD303'}}", 1)
	r := run(t, lbService+"---\n"+annotated, "-")
	if strings.Contains(r.stdout, "ZD101") || !strings.Contains(r.stdout, "ZD303") || !strings.Contains(r.stdout, "1 suppressed") {
		t.Errorf("want ZD101 suppressed and counted, ZD303 kept:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "ZD303") || !strings.Contains(r.stderr, "reason") {
		t.Errorf("stderr does not say that ZD303's suppression lacks a reason: %q", r.stderr)
	}
	var log struct {
		Runs []struct {
			Results []struct {
				RuleID       string `json:"ruleId"`
				Suppressions []struct {
					Kind          string `json:"kind"`
					Justification string `json:"justification"`
				} `json:"suppressions"`
			} `json:"results"`
		} `json:"runs"`
	}
	out := run(t, lbService+"---\n"+annotated, "-o", "sarif", "-").stdout
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, res := range log.Runs[0].Results {
		if res.RuleID == "ZD101" {
			found = len(res.Suppressions) == 1 && res.Suppressions[0].Kind == "inSource" &&
				res.Suppressions[0].Justification == "probed by the mesh sidecar"
		}
	}
	if !found {
		t.Errorf("no ZD101 result with an inSource suppression and its reason:\n%s", out)
	}
}

func TestSARIFDriverMetadata(t *testing.T) {
	var log struct {
		Runs []struct {
			Tool struct {
				Driver struct {
					Version        string `json:"version"`
					InformationURI string `json:"informationUri"`
					Rules          []struct {
						ID      string `json:"id"`
						HelpURI string `json:"helpUri"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(run(t, stream, "-o", "sarif", "-").stdout), &log); err != nil {
		t.Fatal(err)
	}
	d := log.Runs[0].Tool.Driver
	if d.Version == "" || !strings.HasPrefix(d.InformationURI, "https://") {
		t.Errorf("driver version %q informationUri %q", d.Version, d.InformationURI)
	}
	if len(d.Rules) != len(rules.All) {
		t.Fatalf("%d rules", len(d.Rules))
	}
	for _, r := range d.Rules {
		if !strings.HasPrefix(r.HelpURI, d.InformationURI) || !strings.HasSuffix(r.HelpURI, "/docs/rules/"+r.ID+".md") {
			t.Errorf("%s helpUri %q", r.ID, r.HelpURI)
		}
		// The page it points at exists in this repository.
		if _, err := os.Stat(filepath.Join("..", "..", "docs", "rules", r.ID+".md")); err != nil {
			t.Errorf("%s: %v", r.ID, err)
		}
	}
}
