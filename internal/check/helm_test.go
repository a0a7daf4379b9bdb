package check_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check"
)

// chart is a Helm chart whose templates are not YAML before rendering.
var chart = map[string]string{
	"chart/Chart.yaml":                "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"chart/values.yaml":               "replicas: 2\n",
	"chart/templates/deployment.yaml": "{{- if .Values.enabled }}\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n{{- end }}\n",
	"chart/templates/service.yaml":    "apiVersion: v1\nkind: Service\nspec: {{ toYaml .Values.service | nindent 2 }}\n",
}

// Without helm on PATH a chart directory is skipped with one line on stderr
// saying how to pipe it in; its templates are not parsed, and the exit status
// is the other files'.
func TestHelmChartSkippedWithoutHelm(t *testing.T) {
	files := map[string]string{"app/web.yaml": lbService + "---\n" + web}
	for k, v := range chart {
		files[k] = v
	}
	dir := writeFiles(t, files)
	t.Setenv("PATH", t.TempDir()) // no helm
	r := run(t, "", "-o", "json", dir)
	if r.code != check.ExitFindings { // ZD101 on app/web.yaml
		t.Errorf("exit %d, want %d (the chart's skip must not change it)", r.code, check.ExitFindings)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	chartDir := filepath.Join(dir, "chart")
	if len(lines) != 1 || !strings.Contains(lines[0], chartDir) || !strings.Contains(lines[0], "helm template "+chartDir+" | zerodrop check -") {
		t.Errorf("stderr, want one line naming the chart and how to pipe it in:\n%s", r.stderr)
	}
	if countRule(decodeFindings(t, r.stdout), "ZD101") != 1 {
		t.Errorf("the manifest beside the chart was not checked: %s", r.stdout)
	}
}

// fakeHelm is NOT helm: a shell script standing in for `helm template CHART`
// that prints a fixed rendering, so the test needs no helm binary. It fails
// unless called as `helm template <chart dir>`.
const fakeHelm = `#!/bin/sh
[ "$1" = template ] && [ -f "$2/Chart.yaml" ] || { echo "fake helm: unexpected arguments: $*" >&2; exit 3; }
cat <<'EOF'
---
# Source: web/templates/service.yaml
` + lbService + `---
# Source: web/templates/deployment.yaml
` + web + `EOF
`

// With helm on PATH a chart directory is rendered with helm template; the
// rendering is one world, and findings point at the template files.
func TestHelmChartRendered(t *testing.T) {
	dir := writeFiles(t, chart)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "helm"), []byte(fakeHelm), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := run(t, "", "-o", "json", dir)
	fs := decodeFindings(t, r.stdout)
	want := filepath.Join(dir, "chart", "templates", "deployment.yaml")
	if r.code != check.ExitFindings || countRule(fs, "ZD101") != 1 || r.stderr != "" {
		t.Fatalf("exit %d, findings %v, stderr %s", r.code, fs, r.stderr)
	}
	for _, f := range fs {
		if f["rule"] == "ZD101" && f["file"] != want {
			t.Errorf("ZD101 on %v, want the template %s", f["file"], want)
		}
	}
}

// helm template output on stdin: findings are on stdin ("-") and name the
// template of each "# Source:" comment in "template".
func TestHelmSourceCommentsOnStdin(t *testing.T) {
	in := "---\n# Source: web/templates/service.yaml\n" + lbService + "---\n# Source: web/templates/deployment.yaml\n" + web
	fs := decodeFindings(t, run(t, in, "-o", "json", "-").stdout)
	if len(fs) == 0 {
		t.Fatal("no findings")
	}
	for _, f := range fs {
		if f["file"] != "-" || f["template"] != "web/templates/deployment.yaml" {
			t.Errorf("%s on %v (template %v), want - and web/templates/deployment.yaml", f["rule"], f["file"], f["template"])
		}
	}
}
