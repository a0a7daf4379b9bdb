package manifest_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/render"
	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// FuzzParse feeds arbitrary bytes through the parser and, since decoded
// objects can be arbitrarily odd (nil selectors, negative thresholds), the
// rules and the renderers. Nothing may panic, and every position reported
// must lie inside the input. `go test` runs the seeds; `go test -fuzz
// FuzzParse -fuzzminimizetime 5s` explores (with the default 60 s, minimizing
// an input grown from the larger seeds looks like a stall).
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "testdata", "*", "*.yaml"))
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"",
		"---\n---\n...\n",
		"apiVersion: v1\nkind: List\nitems: [null, 1, {kind: Pod}, [{kind: Service, spec: {type: LoadBalancer, selector: {a: b}}}]]\n",
		"kind: Service\nspec:\n  type: LoadBalancer\n  selector: {a: b}\n  ports: [{port: 80, targetPort: x}]\n---\nkind: Pod\nmetadata: {labels: {a: b}}\nspec:\n  containers: [{name: c, readinessProbe: {failureThreshold: -5}, lifecycle: {preStop: {exec: {command: [sh, -c, 'sleep 1e308 && sleep 1e308']}}}}]\n",
		"kind: Deployment\nspec:\n  strategy: {rollingUpdate: {maxUnavailable: 'x%'}}\n  template: {metadata: {labels: {a: b}}}\n---\nkind: PodDisruptionBudget\nspec: {selector: {matchExpressions: [{key: a, operator: Bogus}]}, minAvailable: '200%'}\n",
		"{\"kind\": \"Pod\"}{\"kind\":",
		"[[[[[[[[]]]]]]]]",
		"a: &a [*a, *a]\n",
		"--- |\n  text\n",
		"\xef\xbb\xbf{\"kind\":\"Service\"}",
		"key: [unclosed\n---\nkind: Pod\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := manifest.Parse("fuzz.yaml", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, o := range objs {
			if o.Source.File != "fuzz.yaml" {
				t.Fatalf("object on %q, want fuzz.yaml (a # Source: comment names a template, not the file)", o.Source.File)
			}
			if o.Source.Line < 1 || o.Source.Line > lines {
				t.Fatalf("object at line %d of %d", o.Source.Line, lines)
			}
		}
		for _, err := range errs {
			var pe *manifest.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if pe.Source.Line < 1 || pe.Source.Line > lines {
				t.Fatalf("error at line %d of %d: %v", pe.Source.Line, lines, err)
			}
		}
		for _, p := range timing.Providers {
			rep := rules.Analyze(objs, rules.Config{Provider: p, Overrides: timing.NoOverrides})
			for _, format := range []string{render.FormatText, render.FormatJSON, render.FormatSARIF} {
				if err := render.Write(io.Discard, format, rep, render.Options{Explain: true}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
