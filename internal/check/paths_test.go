package check_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// helmStream is helm template output: two documents after "# Source:"
// comments. The Deployment's only container is on line 16.
var helmStream = "---\n# Source: web/templates/service.yaml\n" + lbService +
	"---\n# Source: web/templates/deployment.yaml\n" + web

const helmContainerLine = 16

// Findings on rendered Helm output read from stdin carry "-" (the path as
// given) and the line in the stream; the template of the "# Source:"
// comment is an extra JSON field, not the file.
func TestStdinFindingsCarryDashAndLine(t *testing.T) {
	if got := strings.Split(helmStream, "\n")[helmContainerLine-1]; !strings.Contains(got, "containers:") {
		t.Fatalf("line %d of the stream is %q, want the container", helmContainerLine, got)
	}
	fs := decodeFindings(t, run(t, helmStream, "-o", "json", "-").stdout)
	if countRule(fs, "ZD101") != 1 {
		t.Fatalf("want one ZD101, got %v", fs)
	}
	for _, f := range fs {
		if f["file"] != "-" {
			t.Errorf("%s on file %v, want - (stdin, as given on the command line)", f["rule"], f["file"])
		}
		if n, _ := f["line"].(float64); n <= 0 {
			t.Errorf("%s at line %v, want the line in the stream", f["rule"], f["line"])
		}
		if f["template"] != "web/templates/deployment.yaml" {
			t.Errorf("%s template %v, want web/templates/deployment.yaml", f["rule"], f["template"])
		}
		if f["rule"] == "ZD101" && f["line"] != float64(helmContainerLine) {
			t.Errorf("ZD101 at line %v, want %d (the container)", f["line"], helmContainerLine)
		}
	}
}

// The same rendering saved to a file: findings carry the file as named on
// the command line and a real line.
func TestRenderedFileFindingsCarryTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(path, []byte(helmStream), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := decodeFindings(t, run(t, "", "-o", "json", path).stdout)
	if len(fs) == 0 {
		t.Fatal("no findings")
	}
	for _, f := range fs {
		if f["file"] != path {
			t.Errorf("%s on %v, want %s", f["rule"], f["file"], path)
		}
		if n, _ := f["line"].(float64); n <= 0 {
			t.Errorf("%s at line %v, want a real line", f["rule"], f["line"])
		}
	}
}

// Text output names the stream's line and the template it came from.
func TestTextNamesLineAndTemplate(t *testing.T) {
	out := run(t, helmStream, "-").stdout
	if !strings.Contains(out, "Deployment/default/web  stdin:9 (web/templates/deployment.yaml)") {
		t.Errorf("text output does not head the Deployment with stdin:9 and its template:\n%s", out)
	}
}

// SARIF: the artifact is the file as given, relative to %SRCROOT% (code
// scanning resolves it from the repository root), with the finding's line;
// the "# Source:" template is a related location.
func TestSARIFArtifactFromCommandLine(t *testing.T) {
	const path = "testdata/realistic/webapp-chart.yaml"
	r := run(t, "", "-o", "sarif", path)
	doc, _ := validateSARIF(t, sarifSchema(t), r.stdout).(map[string]any)
	results := sarifResults(doc)
	if len(results) == 0 {
		t.Fatalf("no results:\n%s", r.stdout)
	}
	for _, res := range results {
		rule := res["ruleId"]
		loc := res["locations"].([]any)[0].(map[string]any)["physicalLocation"].(map[string]any)
		al := loc["artifactLocation"].(map[string]any)
		if al["uri"] != path || al["uriBaseId"] != "%SRCROOT%" {
			t.Errorf("%s: artifactLocation %v, want uri %s with uriBaseId %%SRCROOT%%", rule, al, path)
		}
		if reg, _ := loc["region"].(map[string]any); reg == nil || fmt.Sprint(reg["startLine"]) == "0" {
			t.Errorf("%s: region %v, want the line in %s", rule, loc["region"], path)
		}
		rel, _ := res["relatedLocations"].([]any)
		if len(rel) == 0 {
			t.Errorf("%s: no relatedLocations, want the # Source: template", rule)
			continue
		}
		ral := rel[0].(map[string]any)["physicalLocation"].(map[string]any)["artifactLocation"].(map[string]any)
		if u, _ := ral["uri"].(string); !strings.HasPrefix(u, "web/templates/") {
			t.Errorf("%s: related location %v, want a template web/templates/…", rule, ral)
		}
	}
}

// sarifResults returns the results of a decoded SARIF log's runs.
func sarifResults(doc map[string]any) []map[string]any {
	var out []map[string]any
	runs, _ := doc["runs"].([]any)
	for _, run := range runs {
		results, _ := run.(map[string]any)["results"].([]any)
		for _, res := range results {
			out = append(out, res.(map[string]any))
		}
	}
	return out
}
