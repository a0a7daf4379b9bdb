package manifest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// got summarises objects as "Kind name @line" for comparison.
func got(objs []manifest.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		name := ""
		if m, ok := o.Obj.(interface{ GetName() string }); ok {
			name = m.GetName()
		}
		out[i] = fmt.Sprintf("%s %s @%d", o.Kind, name, o.Source.Line)
	}
	return out
}

func errLines(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		var pe *manifest.ParseError
		if !errors.As(err, &pe) {
			out[i] = "not a ParseError: " + err.Error()
			continue
		}
		out[i] = pe.Source.String()
	}
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestParseYAML(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     []string
		wantErrs []string
	}{
		{
			name: "helm template output with comments and empty documents",
			in: "---\n# Source: web/templates/sa.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\n" +
				"---\n# Source: web/templates/empty.yaml\n\n---\n# Source: web/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n" +
				"---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n",
			// The Service keeps its line in the stream (its template is Source.Template).
			want: []string{"Service web @12", "Deployment web @17"},
		},
		{
			name: "content on the marker line, document end marker, directive",
			in:   "%YAML 1.1\n--- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n...\n---\nkind: Pod\napiVersion: v1\nmetadata: {name: b}\n",
			want: []string{"Pod a @2", "Pod b @5"},
		},
		{
			name: "CRLF and byte order mark",
			in:   "\ufeffapiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: a\r\n---\r\napiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: b\r\n",
			want: []string{"Pod a @1", "Pod b @6"},
		},
		{
			name: "a broken document does not stop the others",
			in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\n# broken\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n   labels: x\n" +
				"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: c\n",
			want:     []string{"Pod a @1", "Pod c @13"},
			wantErrs: []string{"f.yaml:11"},
		},
		{
			name:     "a type error is reported at the document",
			in:       "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\nspec:\n  replicas: three\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n",
			want:     []string{"Pod b @8"},
			wantErrs: []string{"f.yaml:1"},
		},
		{
			name: "unknown kinds, kind-less documents, scalars and custom resources are skipped",
			in: "replicaCount: 1\nimage: nginx\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\njust a string\n" +
				"---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: k\n---\napiVersion: example.com/v1\nkind: Deployment\nmetadata:\n  name: x\n",
			want: nil,
		},
		{
			name: "v1 List and a typed list whose items omit kind",
			in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s}\n- apiVersion: policy/v1\n  kind: PodDisruptionBudget\n  metadata: {name: p}\n" +
				"---\napiVersion: apps/v1\nkind: DeploymentList\nitems:\n- metadata: {name: d1}\n- metadata: {name: d2}\n",
			want: []string{"Service s @4", "PodDisruptionBudget p @7", "Deployment d1 @14", "Deployment d2 @15"}, // each item its own line
		},
		{
			name: "every analysed kind",
			in: "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: b}\n" +
				"---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: c}\n---\napiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: d}\n" +
				"---\napiVersion: v1\nkind: Namespace\nmetadata: {name: e}\n---\nkind: Deployment\nmetadata: {name: f}\n",
			want: []string{"StatefulSet a @1", "DaemonSet b @5", "ReplicaSet c @9", "HorizontalPodAutoscaler d @13", "Namespace e @17", "Deployment f @21"},
		},
		{
			name:     "lists nested too deeply",
			in:       "kind: List\nitems:\n- kind: List\n  items:\n  - kind: List\n    items:\n    - kind: List\n      items:\n      - kind: List\n        items: []\n",
			wantErrs: []string{"f.yaml:9"}, // the item that nests too deep
		},
		{name: "empty input", in: ""},
		{name: "only comments", in: "# nothing here\n---\n# nor here\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := manifest.Parse("f.yaml", []byte(tc.in))
			equal(t, "objects", got(objs), tc.want)
			for _, o := range objs {
				if o.Source.File != "f.yaml" {
					t.Errorf("%s on %q, want f.yaml", o.Kind, o.Source.File)
				}
			}
			equal(t, "errors", errLines(errs), tc.wantErrs)
		})
	}
}

func TestParseDecodesTypedFields(t *testing.T) {
	objs, errs := manifest.Parse("f.yaml", []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 3
  strategy:
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 25%
  template:
    spec:
      containers:
      - name: app
        lifecycle:
          preStop:
            sleep:
              seconds: 15
`))
	if len(errs) != 0 || len(objs) != 1 {
		t.Fatalf("objs %v errs %v", got(objs), errs)
	}
	d, ok := objs[0].Obj.(*appsv1.Deployment)
	if !ok {
		t.Fatalf("decoded as %T", objs[0].Obj)
	}
	if *d.Spec.Replicas != 3 || d.Spec.Strategy.RollingUpdate.MaxSurge.StrVal != "25%" ||
		d.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds != 15 || d.Namespace != "shop" {
		t.Errorf("decoded %+v", d.Spec)
	}
}

func TestParseIsCaseSensitive(t *testing.T) {
	// The API server ignores "Replicas"; so must the analyzer, or it would
	// report a replica count the cluster never sees.
	objs, _ := manifest.Parse("f.yaml", []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec:\n  Replicas: 5\n"))
	if d := objs[0].Obj.(*appsv1.Deployment); d.Spec.Replicas != nil {
		t.Errorf("Replicas was read as replicas: %d", *d.Spec.Replicas)
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     []string
		wantErrs []string
	}{
		{
			name: "kubectl get -o json List",
			in:   "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [\n    {\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"s\"}}\n  ]\n}\n",
			want: []string{"Service s @5"},
		},
		{
			name: "concatenated objects",
			in:   "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}\n\n\n{\"apiVersion\": \"v1\",\n \"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}\n",
			want: []string{"Pod a @1", "Pod b @4"},
		},
		{
			name: "a top-level array",
			in:   "[{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}]",
			want: []string{"Pod a @1"},
		},
		{
			name:     "broken after a good value",
			in:       "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}\n{\"kind\":\n  \"Pod\",,}\n",
			want:     []string{"Pod a @1"},
			wantErrs: []string{"f.json:3"},
		},
		{
			name: "YAML flow mapping that is not JSON",
			in:   "{apiVersion: v1, kind: Pod, metadata: {name: a}}\n",
			want: []string{"Pod a @1"},
		},
		{
			name:     "broken first value is reported by the YAML parser",
			in:       "{\"apiVersion\": \"v1\",\n \"kind\": [}\n",
			wantErrs: []string{"f.json:2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := manifest.Parse("f.json", []byte(tc.in))
			equal(t, "objects", got(objs), tc.want)
			equal(t, "errors", errLines(errs), tc.wantErrs)
		})
	}
}

func TestParseManyDocumentsKeepsOrder(t *testing.T) {
	// Above the parallel threshold, documents are decoded concurrently.
	var b strings.Builder
	var want []string
	for i := range 300 {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p%d\n", i)
		want = append(want, fmt.Sprintf("Pod p%d @%d", i, i*5+2))
	}
	objs, errs := manifest.Parse("f.yaml", []byte(b.String()))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	equal(t, "objects", got(objs), want)
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string) string { return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n" }
	write("a.yaml", pod("a"))
	write("sub/b.yml", pod("b"))
	write("sub/deeper/c.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c"}}`)
	write("sub/notes.txt", pod("ignored-txt"))
	write(".git/d.yaml", pod("ignored-hidden"))
	write("E.YAML", pod("e"))
	write("explicit.manifest", pod("explicit"))

	objs, errs := manifest.Read([]string{dir, filepath.Join(dir, "explicit.manifest"), "-", filepath.Join(dir, "missing.yaml")},
		strings.NewReader(pod("from-stdin")))
	var names []string
	for _, o := range objs {
		names = append(names, o.Obj.(*corev1.Pod).Name+"@"+filepath.Base(o.Source.File))
	}
	equal(t, "objects", names, []string{"e@E.YAML", "a@a.yaml", "b@b.yml", "c@c.json", "explicit@explicit.manifest", "from-stdin@" + manifest.StdinName})
	if len(errs) != 1 || !errors.Is(errs[0], os.ErrNotExist) {
		t.Fatalf("errors %v, want one not-exist error", errs)
	}
	if !strings.Contains(errs[0].Error(), "missing.yaml") {
		t.Errorf("error %q does not name the file", errs[0])
	}
}

func TestSourceString(t *testing.T) {
	if s := (manifest.Source{File: "a.yaml", Line: 3}).String(); s != "a.yaml:3" {
		t.Errorf("got %q", s)
	}
	if s := (manifest.Source{File: "api/v1/namespaces/x/pods/y"}).String(); s != "api/v1/namespaces/x/pods/y" {
		t.Errorf("got %q", s)
	}
}

// A helm template "# Source:" comment names the object's template; the
// object keeps the file and line it was read from. The comment applies to its
// own document only.
func TestHelmSourceComment(t *testing.T) {
	in := "---\n# Source: web/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n" +
		"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n"
	objs, errs := manifest.Parse(manifest.StdinName, []byte(in))
	if len(errs) > 0 || len(objs) != 2 {
		t.Fatalf("objects %v, errors %v", got(objs), errs)
	}
	if s := objs[0].Source; s.File != "-" || s.Line != 3 || s.Template != "web/templates/svc.yaml" || s.String() != "stdin:3 (web/templates/svc.yaml)" {
		t.Errorf("Service source %+v (%s)", s, s)
	}
	if s := objs[1].Source; s.Template != "" || s.String() != "stdin:8" {
		t.Errorf("Pod source %+v (%s), want no template", s, s)
	}
}
