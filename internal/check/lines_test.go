package check_test

import (
	"strings"
	"testing"
)

// listYAML is what kubectl get -o yaml prints: a v1 List. Line numbers are
// asserted below, so keep them in step.
const listYAML = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec: {type: LoadBalancer, selector: {app: web}, ports: [{port: 80}]}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    replicas: 1
    strategy:
      rollingUpdate: {maxUnavailable: 1}
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        containers:
        - name: sidecar
          image: log
        - name: web
          image: web
          ports: [{containerPort: 80}]
`

// listJSON is the same as kubectl get -o json would print it.
const listJSON = `{
  "apiVersion": "v1",
  "kind": "List",
  "items": [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
     "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}},
    {
      "apiVersion": "apps/v1",
      "kind": "Deployment",
      "metadata": {"name": "web"},
      "spec": {
        "replicas": 1,
        "strategy": {"rollingUpdate": {"maxUnavailable": 1}},
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
          "metadata": {"labels": {"app": "web"}},
          "spec": {"containers": [
            {"name": "sidecar", "image": "log"},
            {"name": "web", "image": "web", "ports": [{"containerPort": 80}]}
          ]}
        }
      }
    }
  ]
}
`

// Findings carry the line of the offending field — the container for
// ZD101, the strategy for ZD301 — also inside List items, in YAML and JSON.
func TestFindingLines(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		in                    string
		deployment, container int
		strategy              int
	}{
		{"yaml List", listYAML, 8, 22, 13},
		{"json List", listJSON, 7, 19, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.in, "-o", "json", "-")
			fs := decodeFindings(t, r.stdout)
			if len(fs) == 0 {
				t.Fatalf("no findings; stderr %s", r.stderr)
			}
			seen := map[string]bool{}
			for _, f := range fs {
				line, _ := f["line"].(float64)
				want := 0
				switch {
				case f["rule"] == "ZD101" && f["container"] == "web":
					want = tc.container
				case f["rule"] == "ZD301":
					want = tc.strategy
				case f["rule"] == "ZD304":
					want = tc.deployment // no field to point at: the object's line
				default:
					if int(line) < tc.deployment && !strings.HasPrefix(f["object"].(string), "Service/") {
						t.Errorf("%s %s at line %v, before its List item", f["rule"], f["container"], f["line"])
					}
					continue
				}
				seen[f["rule"].(string)] = true
				if int(line) != want {
					t.Errorf("%s %s at line %v, want %d", f["rule"], f["container"], f["line"], want)
				}
			}
			for _, rule := range []string{"ZD101", "ZD301", "ZD304"} {
				if !seen[rule] {
					t.Errorf("no %s finding", rule)
				}
			}
		})
	}
}
