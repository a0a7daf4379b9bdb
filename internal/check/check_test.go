package check_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

const (
	clean    = "testdata/realistic/well-configured.yaml"
	findings = "testdata/golden/input.yaml"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stderr string // substring; "" means stderr must be empty
	}{
		{"no error findings", []string{"--provider", "azure", clean}, "", check.ExitOK, ""},
		{"error findings", []string{findings}, "", check.ExitFindings, ""},
		{"warnings only", []string{"-"}, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: LoadBalancer, selector: {app: a}, ports: [{port: 80}]}\n" +
			"---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: a}, annotations: {zerodrop.dev/ignore: 'ZD101, ZD201: a test pod'}}\nspec: {containers: [{name: c, ports: [{containerPort: 80}]}]}\n",
			check.ExitOK, ""},
		{"nothing to check", []string{"-"}, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", check.ExitOK, ""},
		{"parse error wins over findings", []string{findings, "-"}, "kind: Pod\nmetadata:\n  name: [\n", check.ExitUsage, "stdin:3: invalid YAML"},
		{"missing file", []string{"does-not-exist.yaml"}, "", check.ExitUsage, "does-not-exist.yaml: no such file or directory"},
		{"no input", nil, "", check.ExitUsage, "no input"},
		{"unknown flag", []string{"--fast", clean}, "", check.ExitUsage, "flag provided but not defined: -fast"},
		{"unknown provider", []string{"--provider", "digitalocean", clean}, "", check.ExitUsage, `unknown provider "digitalocean"`},
		{"unknown output", []string{"-o", "yaml", clean}, "", check.ExitUsage, `unknown output format "yaml"`},
		{"negative override", []string{"--deregistration-seconds", "-3", clean}, "", check.ExitUsage, "--deregistration-seconds must be 0 or more"},
		{"cluster flag without --cluster", []string{"--context", "prod", clean}, "", check.ExitUsage, "--context needs --cluster"},
		{"-n without --cluster", []string{"-n", "shop", clean}, "", check.ExitUsage, "-n needs --cluster"},
		{"--cluster with paths", []string{"--cluster", clean}, "", check.ExitUsage, "give no paths"},
		{"-n with -A", []string{"--cluster", "-n", "a", "-A"}, "", check.ExitUsage, "exclude each other"},
		{"missing kubeconfig", []string{"--cluster", "--kubeconfig", "does-not-exist"}, "", check.ExitUsage, "load kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if tc.stderr == "" && r.stderr != "" {
				t.Errorf("unexpected stderr:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.stderr)
			}
		})
	}
}

func TestParseErrorKeepsTheOtherDocuments(t *testing.T) {
	r := run(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec:\n  replicas: many\n", "-o", "json", findings, "-")
	if r.code != check.ExitUsage || !strings.Contains(r.stderr, "stdin:1: decode Deployment") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if n := len(decodeFindings(t, r.stdout)); n == 0 {
		t.Error("the findings of the good file were not printed")
	}
}

func TestHelp(t *testing.T) {
	r := run(t, "", "-h")
	if r.code != check.ExitOK || !strings.Contains(r.stdout, "--provider") || !strings.Contains(r.stdout, "Exit status") {
		t.Fatalf("exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

func TestFlagsAnywhere(t *testing.T) {
	want := run(t, "", "-o", "json", "--provider", "azure", findings).stdout
	for _, args := range [][]string{
		{findings, "-o", "json", "--provider", "azure"},
		{"--provider=azure", findings, "--output", "json"},
		{"-o", "json", "--provider", "azure", "--", findings},
	} {
		if got := run(t, "", args...).stdout; got != want {
			t.Errorf("%q printed something else than flags first:\n%s", args, got)
		}
	}
}

func TestDoubleDashEndsFlags(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "-o")
	data, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "--provider", "azure", "--", name)
	if r.code != check.ExitOK || !strings.Contains(r.stdout, "1 workload") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// decodeFindings checks the JSON contract: exactly the eight keys, strings but
// line, and the optional "template" (a helm template's "# Source:" path).
func decodeFindings(t *testing.T, out string) []map[string]any {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc) != 1 || doc["findings"] == nil {
		t.Fatalf("top-level keys: %s", out)
	}
	if string(doc["findings"]) == "null" {
		t.Fatal(`"findings" is null, want an array`)
	}
	var fs []map[string]any
	if err := json.Unmarshal(doc["findings"], &fs); err != nil {
		t.Fatal(err)
	}
	keys := []string{"container", "file", "fix", "line", "message", "object", "rule", "severity"}
	for _, f := range fs {
		var got []string
		for k, v := range f {
			if k == "template" {
				if s, ok := v.(string); !ok || s == "" {
					t.Errorf("template is %#v, want a non-empty string when present", v)
				}
				continue
			}
			got = append(got, k)
			if k == "line" {
				if n, ok := v.(float64); !ok || n < 0 || n != float64(int(n)) {
					t.Errorf("line is %v, want a number ≥ 0", v)
				}
				continue
			}
			if _, ok := v.(string); !ok {
				t.Errorf("%s is %T, want string", k, v)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Fatalf("finding keys %v, want %v", got, keys)
		}
	}
	return fs
}

func TestJSONContract(t *testing.T) {
	fs := decodeFindings(t, run(t, "", "-o", "json", findings).stdout)
	rulesSeen := map[string]bool{}
	for _, f := range fs {
		rulesSeen[f["rule"].(string)] = true
		sev := f["severity"].(string)
		if sev != "error" && sev != "warning" {
			t.Errorf("severity %q", sev)
		}
		if parts := strings.Split(f["object"].(string), "/"); len(parts) != 3 || parts[1] == "" {
			t.Errorf("object %q is not Kind/namespace/name", f["object"])
		}
		if f["file"] != findings {
			t.Errorf("file %q, want %q", f["file"], findings)
		}
	}
	for _, id := range []string{"ZD101", "ZD102", "ZD103", "ZD104", "ZD201", "ZD202", "ZD203", "ZD204", "ZD301", "ZD302", "ZD303", "ZD304", "ZD401", "ZD402"} {
		if !rulesSeen[id] {
			t.Errorf("the golden input does not trigger %s", id)
		}
	}
	if got := decodeFindings(t, run(t, "", "-o", "json", "--provider", "azure", clean).stdout); len(got) != 0 {
		t.Errorf("clean input has findings %v", got)
	}
	if !strings.Contains(run(t, "", "-o", "json", findings).stdout, `"object": "Pod/default/debug"`) {
		t.Error("an unset namespace is not reported as default")
	}
}

func TestSARIFIsValid(t *testing.T) {
	var log struct {
		Version string `json:"version"`
		Schema  string `json:"$schema"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID                   string `json:"id"`
						ShortDescription     struct{ Text string }
						DefaultConfiguration struct{ Level string }
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct{ Text string }
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct{ URI string }
						Region           struct{ StartLine int }
					}
				}
			} `json:"results"`
		} `json:"runs"`
	}
	out := run(t, "", "-o", "sarif", findings).stdout
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || !strings.Contains(log.Schema, "sarif-schema-2.1.0") || len(log.Runs) != 1 {
		t.Fatalf("header: version %q schema %q runs %d", log.Version, log.Schema, len(log.Runs))
	}
	r := log.Runs[0]
	if r.Tool.Driver.Name != "zerodrop" || len(r.Tool.Driver.Rules) != len(rules.All) {
		t.Fatalf("driver %q with %d rules", r.Tool.Driver.Name, len(r.Tool.Driver.Rules))
	}
	if len(r.Results) == 0 {
		t.Fatal("no results")
	}
	for _, res := range r.Results {
		rule := r.Tool.Driver.Rules[res.RuleIndex]
		// ZD301's severity follows the resolved value: its results may be
		// errors although the rule's default level is warning.
		if rule.ID != res.RuleID || (rule.DefaultConfiguration.Level != res.Level && rule.ID != "ZD301") {
			t.Errorf("result %s points at rule %s (%s)", res.RuleID, rule.ID, rule.DefaultConfiguration.Level)
		}
		if res.Level != "error" && res.Level != "warning" || res.Message.Text == "" {
			t.Errorf("result %+v", res)
		}
		if len(res.Locations) != 1 || res.Locations[0].PhysicalLocation.ArtifactLocation.URI != findings ||
			res.Locations[0].PhysicalLocation.Region.StartLine < 1 {
			t.Errorf("locations %+v", res.Locations)
		}
	}
	if !strings.Contains(run(t, "", "-o", "sarif", "--provider", "azure", clean).stdout, `"results": []`) {
		t.Error("an empty SARIF run must have results: []")
	}
}

func TestExplain(t *testing.T) {
	r := run(t, "", "--explain", "--provider", "aws", findings)
	for _, want := range []string{
		// The Service has no target-type annotation: instance targets, so the
		// target group's deregistration delay does not apply.
		"explain: deregistration: AWS instance targets, node-backed, Local: a node takes traffic only while the load balancer's health check sees a ready pod on it; AWS NLB target group health check interval 10 s × 3 failed checks + 5 s endpoint propagation = 35 s",
		"the 300 s deregistration delay [AWS target group default] does not apply",
		"explain: registration: AWS instance targets, node-backed, Local: a node takes traffic only while the load balancer's health check sees a ready pod on it; AWS NLB target group health check interval 10 s × 3 healthy checks + 5 s endpoint propagation = 35 s",
		"explain: preStop 10 s + readiness periodSeconds 10 × (failureThreshold 2 − 1) = 20 s < 30 s (the end of the grace period (terminationGracePeriodSeconds unset (default 30), before the deregistration time of 35 s))",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--explain output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(run(t, "", findings).stdout, "explain:") {
		t.Error("explanations printed without --explain")
	}
}

func TestOverrideFlags(t *testing.T) {
	// The golden input's frontend sleeps 10 s: enough with 10 s deregistration.
	fs := decodeFindings(t, run(t, "", "-o", "json", "--deregistration-seconds", "10", "--registration-seconds", "0", findings).stdout)
	for _, f := range fs {
		if f["rule"] == "ZD202" || f["rule"] == "ZD104" {
			t.Errorf("%s still fires with the overrides: %s", f["rule"], f["message"])
		}
	}
}

func TestHelmTemplateOnStdin(t *testing.T) {
	data, err := os.ReadFile("testdata/realistic/webapp-chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, string(data), "-o", "json", "-")
	fs := decodeFindings(t, r.stdout)
	if r.code != check.ExitFindings || len(fs) == 0 || fs[0]["file"] != "-" || fs[0]["template"] != "web/templates/deployment.yaml" {
		t.Fatalf("exit %d, findings %v, stderr %s", r.code, fs, r.stderr)
	}
}
