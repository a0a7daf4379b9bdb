package install

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

const (
	release   = "zerodrop"
	namespace = "zerodrop-system"
	chartDir  = "charts/zerodrop"
	// deployValues are the values hack/render-deploy.sh renders deploy/ with.
	deployValues = "hack/deploy-values.yaml"
)

// allFeatures turns on every optional part of the chart.
var allFeatures = []string{
	"webhook.certManager.enabled=true",
	"networkPolicy.enabled=true",
	"metrics.serviceMonitor.enabled=true",
	"metrics.prometheusRule.enabled=true",
}

// repo is the module root and the helm binary built by hack/helm.sh.
func repo(t *testing.T) (root, helm string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm, err = controlplane.Helm()
	if err != nil {
		t.Fatal(err)
	}
	return root, helm
}

// runHelm runs helm in the repository root and returns stdout, or an error
// carrying stderr (where helm's `fail` messages go).
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	root, helm := repo(t)
	cmd := exec.Command(helm, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), errors.New(strings.TrimSpace(stderr.String()) + " (" + err.Error() + ")")
	}
	return stdout.Bytes(), nil
}

// template renders the chart with the deploy values and the given --set
// values, as `helm install` would in the release namespace.
func template(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace, "--values", deployValues}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return runHelm(t, args...)
}

// render is template that must succeed, parsed into objects.
func render(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := template(t, set...)
	if err != nil {
		t.Fatalf("helm template %v: %v", set, err)
	}
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatalf("helm template %v: %v", set, err)
	}
	return objs
}

// parseObjects splits a multi-document YAML stream into objects, skipping
// documents that hold only comments.
func parseObjects(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// find returns the object of that kind and name, failing the test without it.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the render has no %s %s", kind, name)
	return nil
}

// has reports whether the render has an object of that kind and name.
func has(objs []*unstructured.Unstructured, kind, name string) bool {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return true
		}
	}
	return false
}

// typed converts an object to its Go type (Deployment, ClusterRole, …).
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// abs is a repository path made absolute.
func abs(t *testing.T, rel string) string {
	root, _ := repo(t)
	return filepath.Join(root, rel)
}
