package render

import (
	"bytes"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

func TestFileURI(t *testing.T) {
	tests := map[string]string{
		"deploy/web.yaml":         "deploy/web.yaml",
		"dir with space/a b.yaml": "dir%20with%20space/a%20b.yaml",
		"/abs/path/web.yaml":      "file:///abs/path/web.yaml",
		"stdin":                   "stdin",
		"apis/apps/v1/namespaces/shop/deployments/web": "apis/apps/v1/namespaces/shop/deployments/web",
		"c:odd.yaml": "./c:odd.yaml", // not a scheme
	}
	for in, want := range tests {
		if got := fileURI(in); got != want {
			t.Errorf("fileURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteRejectsUnknownFormat(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "yaml", rules.Report{}, Options{}); err == nil {
		t.Fatal("no error for an unknown format")
	}
}

func TestTextSummary(t *testing.T) {
	var b bytes.Buffer
	rep := rules.Report{Workloads: 1, Services: 2, Findings: []rules.Finding{
		{Rule: "ZD303", Severity: rules.Warning, Source: manifest.Source{File: "a.yaml", Line: 3}, Object: "Deployment/x/a", Message: "m", Fix: "f", Explain: []string{"e"}},
	}}
	if err := Text(&b, rep, Options{Provider: "aws"}); err != nil {
		t.Fatal(err)
	}
	want := "Deployment/x/a  a.yaml:3\n  warning ZD303  m\n                 fix: f\n\nzerodrop check: 0 errors, 1 warning (1 workload selected by 2 LoadBalancer Services, provider aws)\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	if err := Text(&b, rep, Options{Explain: true}); err != nil || !strings.Contains(b.String(), "explain: e\n") {
		t.Errorf("explain missing: %q %v", b.String(), err)
	}
}

func TestClusterObjectsHaveNoRegion(t *testing.T) {
	var b bytes.Buffer
	rep := rules.Report{Findings: []rules.Finding{{Rule: "ZD101", Severity: rules.Error, Source: manifest.Source{File: "apis/apps/v1/namespaces/x/deployments/a", Cluster: true}, Object: "Deployment/x/a"}}}
	if err := SARIF(&b, rep); err != nil {
		t.Fatal(err)
	}
	// An API path is no file of the repository: no region, no %SRCROOT%.
	if strings.Contains(b.String(), "region") || strings.Contains(b.String(), "uriBaseId") || !strings.Contains(b.String(), `"uri": "apis/apps/v1/namespaces/x/deployments/a"`) {
		t.Errorf("sarif:\n%s", b.String())
	}
}

// TestJSONStreamsTheWholeReportsBytes: JSON encodes finding by finding, and
// must print exactly what encoding the whole report at once prints (the
// contract's shape), for no, one and several findings, suppressed ones left
// out, HTML characters unescaped and a template only where there is one.
func TestJSONStreamsTheWholeReportsBytes(t *testing.T) {
	f := func(rule string, suppressed bool, template string) rules.Finding {
		return rules.Finding{Rule: rule, Severity: rules.Warning, Source: manifest.Source{File: "-", Template: template},
			Object: "Deployment/x/a", Container: "c", Message: `sh -c "sleep 5 && kill <pid>"` + "\n\ttab", Fix: "f", Suppressed: suppressed}
	}
	for _, findings := range [][]rules.Finding{
		nil,
		{f("ZD101", true, "")},
		{f("ZD101", false, "")},
		{f("ZD101", true, ""), f("ZD201", false, "web/templates/d.yaml"), f("ZD303", false, ""), f("ZD304", true, "")},
	} {
		rep := rules.Report{Findings: findings}
		var got, want bytes.Buffer
		if err := JSON(&got, rep); err != nil {
			t.Fatal(err)
		}
		whole := struct {
			Findings []jsonFinding `json:"findings"`
		}{Findings: []jsonFinding{}}
		for _, x := range findings {
			if !x.Suppressed {
				whole.Findings = append(whole.Findings, jsonFinding{Rule: x.Rule, Severity: string(x.Severity), File: x.Source.File,
					Object: x.Object, Container: x.Container, Message: x.Message, Fix: x.Fix, Template: x.Source.Template})
			}
		}
		if err := encode(&want, whole); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("got\n%s\nwant\n%s", got.String(), want.String())
		}
	}
}
