package check_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"zerodrop.dev/zerodrop/internal/check"
	"zerodrop.dev/zerodrop/internal/controlplane"
)

// sarifSchema compiles the official SARIF 2.1.0 schema (testdata/README.md
// says where it comes from). It is a draft-04 schema; the library knows that
// draft and needs no network.
func sarifSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "sarif-schema-2.1.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("parse the SARIF schema: %v", err)
	}
	const url = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("compile the SARIF schema: %v", err)
	}
	return s
}

// validateSARIF fails the test unless out is a SARIF 2.1.0 log by the schema.
func validateSARIF(t *testing.T, s *jsonschema.Schema, out string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("output does not validate against SARIF 2.1.0:\n%v", err)
	}
	return v
}

// The committed SARIF goldens (the ones TestGolden compares the output with)
// are valid SARIF 2.1.0.
func TestSARIFGoldenValidatesAgainstSchema(t *testing.T) {
	s := sarifSchema(t)
	for _, name := range []string{"sarif.golden", "sarif-clean.golden"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "golden", name))
			if err != nil {
				t.Fatal(err)
			}
			validateSARIF(t, s, string(data))
		})
	}
}

// The schema check is not vacuous: a log without its required version is refused.
func TestSARIFSchemaRejectsInvalidLog(t *testing.T) {
	s := sarifSchema(t)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"runs": []}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Validate(v) == nil {
		t.Fatal("a SARIF log without version validated")
	}
}

// A real chart rendered by the real helm and piped in the way a user does,
// `helm template <chart> | zerodrop check -o sarif -`: the SARIF is valid
// 2.1.0, places each finding on stdin ("-", relative to %SRCROOT%) at its
// line, and names the template it came from as a related location.
func TestHelmTemplatePipedToSARIF(t *testing.T) {
	if testing.Short() {
		t.Skip("builds helm from the Go module proxy")
	}
	helm, err := controlplane.Helm()
	if err != nil {
		t.Fatal(err)
	}
	var rendered, stderr bytes.Buffer
	cmd := exec.Command(helm, "template", filepath.Join("testdata", "helm-chart"))
	// helm keeps its config and cache under HOME/XDG dirs; keep them in the test.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home, "XDG_DATA_HOME="+home)
	cmd.Stdout, cmd.Stderr = &rendered, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(rendered.String(), "# Source: shop/templates/deployment.yaml") {
		t.Fatalf("helm template output has no Source comment for the Deployment:\n%s", rendered.String())
	}

	r := run(t, rendered.String(), "-o", "sarif", "-")
	if r.code != check.ExitFindings {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, check.ExitFindings, r.stderr)
	}
	doc, ok := validateSARIF(t, sarifSchema(t), r.stdout).(map[string]any)
	if !ok {
		t.Fatalf("SARIF log is not an object:\n%s", r.stdout)
	}
	templates := map[string][]string{} // rule -> related (template) URIs
	for _, res := range sarifResults(doc) {
		rule, _ := res["ruleId"].(string)
		for _, l := range res["locations"].([]any) {
			pl, _ := l.(map[string]any)["physicalLocation"].(map[string]any)
			al, _ := pl["artifactLocation"].(map[string]any)
			if al["uri"] != "-" || al["uriBaseId"] != "%SRCROOT%" {
				t.Errorf("%s at %v, want uri - (stdin) with uriBaseId %%SRCROOT%%", rule, al)
			}
			if reg, _ := pl["region"].(map[string]any); reg == nil {
				t.Errorf("%s has no region, want its line on stdin", rule)
			}
		}
		rel, _ := res["relatedLocations"].([]any)
		for _, l := range rel {
			pl, _ := l.(map[string]any)["physicalLocation"].(map[string]any)
			al, _ := pl["artifactLocation"].(map[string]any)
			uri, _ := al["uri"].(string)
			templates[rule] = append(templates[rule], uri)
		}
	}
	if len(templates["ZD101"]) == 0 {
		t.Fatalf("no ZD101 with a template (the Deployment has no readinessProbe); templates by rule: %v\n%s", templates, r.stdout)
	}
	for rule, us := range templates {
		for _, u := range us {
			if u != "shop/templates/deployment.yaml" && u != "shop/templates/service.yaml" {
				t.Errorf("%s from %q, want a template of the chart (shop/templates/...)", rule, u)
			}
		}
	}
	for _, u := range templates["ZD101"] {
		if u != "shop/templates/deployment.yaml" {
			t.Errorf("ZD101 from %q, want shop/templates/deployment.yaml", u)
		}
	}
}
