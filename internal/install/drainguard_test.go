package install

import (
	"strings"
	"testing"
)

// The guard against a Service claiming the drain address (CVE-2020-8554) is
// a ValidatingAdmissionPolicy and its binding, rendered where the cluster
// serves the v1 API, naming drain.clusterIP as a CEL string; off with
// drain.guardExternalIPs=false; absent where the API is not served (an
// install would fail on the unknown kind).
func TestChartGuardsTheDrainAddress(t *testing.T) {
	const vap = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
	guard := func(args ...string) (policy, binding bool, text string) {
		t.Helper()
		out, err := runHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--values", deployValues}, args...)...)
		if err != nil {
			t.Fatalf("helm template %v: %v", args, err)
		}
		objs, err := parseObjects(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "ValidatingAdmissionPolicy":
				policy = true
				exprs := expressions(o.Object, "spec", "variables")
				text = strings.Join(exprs, " ")
			case "ValidatingAdmissionPolicyBinding":
				binding = true
			}
		}
		return policy, binding, text
	}
	p, b, vars := guard("--api-versions", vap, "--set", "drain.clusterIP=10.96.0.91")
	if !p || !b || !strings.Contains(vars, "'10.96.0.91'") {
		t.Errorf("with the API served: policy %v, binding %v, variables %q; want both, the drain address as a CEL string", p, b, vars)
	}
	if p, b, _ := guard("--api-versions", vap, "--set", "drain.guardExternalIPs=false"); p || b {
		t.Errorf("guardExternalIPs=false: policy %v, binding %v, want neither", p, b)
	}
	if p, b, _ := guard(); p || b {
		t.Errorf("API not served: policy %v, binding %v, want neither", p, b)
	}
}

// expressions returns the expression of each entry of the list at path.
func expressions(obj map[string]any, path ...string) []string {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	list, _ := cur.([]any)
	var out []string
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			if s, ok := m["expression"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
