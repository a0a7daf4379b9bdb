package check_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lbService and web are a minimal LoadBalancer Service and the Deployment it
// selects (no readinessProbe: ZD101 fires when the Service selects it).
const (
	lbService = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: LoadBalancer, selector: {app: web}, ports: [{port: 80}]}\n"
	web       = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n" +
		"  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: web, ports: [{containerPort: 80}]}]}\n"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func countRule(fs []map[string]any, rule string) int {
	n := 0
	for _, f := range fs {
		if f["rule"] == rule {
			n++
		}
	}
	return n
}

// A Service in one file does not select a Deployment of another file: each
// file is its own world (two unrelated manifests in one directory).
func TestEachFileIsItsOwnWorld(t *testing.T) {
	dir := writeFiles(t, map[string]string{"svc.yaml": lbService, "deploy.yaml": web})
	fs := decodeFindings(t, run(t, "", "-o", "json", dir).stdout)
	if n := countRule(fs, "ZD101"); n != 0 {
		t.Errorf("%d ZD101 findings: the Service of svc.yaml selected the Deployment of deploy.yaml", n)
	}
	// The same objects in one stream are one world.
	fs = decodeFindings(t, run(t, lbService+"---\n"+web, "-o", "json", "-").stdout)
	if n := countRule(fs, "ZD101"); n != 1 {
		t.Errorf("%d ZD101 findings in one stream, want 1", n)
	}
}

// The same object twice in one world is checked once, and stderr says so.
func TestDuplicateObjectReportedOnce(t *testing.T) {
	r := run(t, lbService+"---\n"+web+"---\n"+web, "-o", "json", "-")
	if n := countRule(decodeFindings(t, r.stdout), "ZD101"); n != 1 {
		t.Errorf("%d ZD101 findings for a Deployment given twice, want 1", n)
	}
	if !strings.Contains(r.stderr, "stdin:15: Deployment/default/web duplicates stdin:6") {
		t.Errorf("stderr %q does not name the duplicate", r.stderr)
	}
}

// A LoadBalancer Service that selects nothing in its world is a warning
// (an un-rendered kustomize base whose namespace comes from the
// kustomization); a Service without a selector is left alone (its endpoints
// are managed by hand).
func TestLoadBalancerSelectingNothing(t *testing.T) {
	r := run(t, lbService, "-o", "json", "-")
	fs := decodeFindings(t, r.stdout)
	if r.code != 0 || len(fs) != 1 || fs[0]["rule"] != "ZD403" || fs[0]["severity"] != "warning" ||
		fs[0]["object"] != "Service/default/web" || !strings.Contains(fs[0]["message"].(string), "kustomization") {
		t.Fatalf("exit %d, findings %v, want one ZD403 warning on Service/default/web naming the kustomization", r.code, fs)
	}
	noSelector := "apiVersion: v1\nkind: Service\nmetadata: {name: ext}\nspec: {type: LoadBalancer, ports: [{port: 80}]}\n"
	if fs := decodeFindings(t, run(t, noSelector, "-o", "json", "-").stdout); len(fs) != 0 {
		t.Errorf("a Service without selector: %v", fs)
	}
	if fs := decodeFindings(t, run(t, lbService+"---\n"+web, "-o", "json", "-").stdout); countRule(fs, "ZD403") != 0 {
		t.Errorf("ZD403 on a Service that selects a Deployment: %v", fs)
	}
}
