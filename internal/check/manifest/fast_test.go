package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// slowDecode is the reference: sigs.k8s.io/yaml's conversion and the JSON
// decoding every document took before the fast path.
func slowDecode(src Source, data []byte) (decoded, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return decoded{}, err
	}
	return decodeJSON(src, j), nil
}

// agree checks one document: where the fast path takes it, the reference
// must decode it without error to the same objects. It reports whether the
// fast path took it.
func agree(t *testing.T, data []byte) bool {
	t.Helper()
	src := Source{File: "f.yaml", Line: 1}
	fast, ok := fastDecode(src, &docText{data: data, line: 1})
	if !ok {
		return false
	}
	slow, err := slowDecode(src, data)
	if err != nil || len(slow.errs) > 0 {
		t.Fatalf("the fast path took a document the reference rejects (%v %v):\n%s", err, slow.errs, data)
	}
	if len(fast.objs) != len(slow.objs) {
		t.Fatalf("fast path: %d objects, reference: %d:\n%s", len(fast.objs), len(slow.objs), data)
	}
	for i := range fast.objs {
		if fast.objs[i].Kind != slow.objs[i].Kind || !reflect.DeepEqual(fast.objs[i].Obj, slow.objs[i].Obj) {
			t.Fatalf("fast path decodes differently:\n%#v\nreference:\n%#v\ninput:\n%s", fast.objs[i].Obj, slow.objs[i].Obj, data)
		}
	}
	return true
}

// TestFastPathAgrees holds the fast path to sigs.k8s.io/yaml on every
// document of the analyzer's test data (real-world corpora included) and on
// YAML 1.1 corner cases, and checks that it takes the ordinary documents
// (otherwise it would be correct and useless).
func TestFastPathAgrees(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "*", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	files = append(files, more...)
	taken, docs := 0, 0
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range splitYAML(data) {
			docs++
			if agree(t, d.data) {
				taken++
			}
		}
	}
	if docs == 0 || taken*10 < docs*8 {
		t.Errorf("the fast path took %d of %d documents", taken, docs)
	}
	cases := []struct {
		yaml string
		fast bool
	}{
		{"kind: Service\nmetadata: {name: a, labels: {x: yes, y: on, z: 'no', w: n}}\n", false}, // booleans into strings: the reference fails
		{"kind: ConfigMap\ndata: {a: yes, b: 1.5, c: 0x10, d: 2001-12-14, e: .inf, f: 1_000, g: 010, h: -0, i: +1, j: .git}\n", false},
		{"kind: ConfigMap\ndata: {a: -Xmx512m, b: 8080/TCP, c: 1.2.3, d: '1.5', e: /ready, f: ~, g: , h: 12345678901234567890}\n", false},
		{"kind: Pod\nmetadata: {name: p, labels: {a: -Xmx512m, b: 8080/TCP, c: 1.2.3, d: '1.5', e: /ready, f: \"\\u00e9\\t\\\"\", g: \"\\xff\"}}\nspec:\n  containers:\n  - name: c\n    args: [-v, +x, .dot, 2001x, 0z, \"<<\"]\n    command:\n    - |\n      sleep 5\n    - >-\n      folded\n      text\n", true},
		{"kind: Service\nspec: {ports: [{port: 80, targetPort: 8080}], selector: {app: web}, type: LoadBalancer}\n", true},
		{"kind: Service\nspec: {ports: [{port: 80.0}]}\n", false},
		{"kind: Service\nmetadata: &m {name: a}\nspec: {selector: *m}\n", false},
		{"kind: Service\nspec: {<<: {type: LoadBalancer}}\n", false},
		{"kind: Service\nspec: {type: LoadBalancer, type: ClusterIP}\n", false},
		{"kind: Service\nspec: !!map {type: LoadBalancer}\n", false},
		{"kind: Service\nspec: {1: a}\n", false},
		{"kind: Deployment\nspec: {replicas: x}\n", false}, // a decode error: the reference words it
		{"apiVersion: v1\nkind: List\nitems: [{kind: Pod}]\n", false},
		{"kind: [Service]\n", false},
		{"- kind: Pod\n", false},
	}
	for _, c := range cases {
		if got := agree(t, []byte(c.yaml)); got != c.fast {
			t.Errorf("fast path took it: %v, want %v:\n%s", got, c.fast, c.yaml)
		}
	}
}

// FuzzFastPathAgrees: whatever the fast path takes, sigs.k8s.io/yaml decodes
// to the same objects.
func FuzzFastPathAgrees(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "testdata", "*", "*.yaml"))
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil {
			for _, d := range splitYAML(data) {
				f.Add(d.data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range splitYAML(data) {
			agree(t, d.data)
		}
	})
}
