// Package manifest reads Kubernetes objects from YAML and JSON manifests
// (multi-document streams, List kinds, helm template / kustomize build output)
// into the typed k8s.io/api structs, remembering for each object the file and
// line it came from.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Kinds the analyzer reads. Everything else is skipped without a word: a
// manifest directory legitimately holds ConfigMaps, CRDs and Chart.yaml.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
	KindDaemonSet   = "DaemonSet"
	KindReplicaSet  = "ReplicaSet"
	KindPod         = "Pod"
	KindService     = "Service"
	KindPDB         = "PodDisruptionBudget"
	KindHPA         = "HorizontalPodAutoscaler"
	KindNamespace   = "Namespace"
	// KindMutatingWebhook is read for the sidecars its webhooks inject.
	KindMutatingWebhook = "MutatingWebhookConfiguration"
)

// MutatingWebhookConfiguration is the part of the admissionregistration
// kind the analyzer reads: which pods each webhook acts on. Its clientConfig
// is left out, so a manifest's placeholder caBundle ("XYZ", a template's
// "${CA_BUNDLE}"), which the API type would reject as invalid base64, does
// not make the document unreadable.
type MutatingWebhookConfiguration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Webhooks          []MutatingWebhook `json:"webhooks,omitempty"`
}

// MutatingWebhook is one webhook of a configuration, reduced to its scope.
type MutatingWebhook struct {
	Name              string                                       `json:"name"`
	Rules             []admissionregistrationv1.RuleWithOperations `json:"rules,omitempty"`
	NamespaceSelector *metav1.LabelSelector                        `json:"namespaceSelector,omitempty"`
	ObjectSelector    *metav1.LabelSelector                        `json:"objectSelector,omitempty"`
}

// maxListDepth bounds List-in-List nesting, which no real tool emits, so that
// hostile input cannot recurse without end.
const maxListDepth = 4

// Source says where an object was read from: the path as given on the
// command line ("-" for stdin, StdinName) or found walking a directory, and
// the line there. Line is 1-based; 0 means the object has no line (it came
// from a cluster, or from a chart directory rendered by helm).
type Source struct {
	File string
	Line int
	// Template is the chart template a helm template "# Source:" comment
	// names before the object's document (web/templates/deployment.yaml):
	// what a user edits, while File and Line say where the rendered text is.
	Template string
	// Cluster is set for objects read from a cluster: File is an API path,
	// not a file.
	Cluster bool
	// loc finds lines inside the object (Field); nil when there is no text.
	loc *locator
}

// String is file:line for people: stdin is called "stdin", and the template
// of a "# Source:" comment follows in parentheses.
func (s Source) String() string {
	out := s.File
	if out == StdinName {
		out = "stdin"
	}
	if s.Line > 0 {
		out += ":" + strconv.Itoa(s.Line)
	}
	if s.Template != "" {
		out += " (" + s.Template + ")"
	}
	return out
}

// Object is one decoded object of a known kind. Obj is a pointer to the typed
// struct: *appsv1.Deployment, *corev1.Service, *policyv1.PodDisruptionBudget…
type Object struct {
	Source Source
	Kind   string
	Obj    any
	// World names the input the object was read from (a file, stdin, a
	// rendered Helm chart): objects only select, protect or scale objects of
	// their own world, so two unrelated manifests never mix. Empty for
	// objects read from a cluster, which is one world.
	World string
}

// ParseError is a document that could not be read. The other documents of the
// same file are still returned.
type ParseError struct {
	Source Source
	Err    error
}

func (e *ParseError) Error() string { return e.Source.String() + ": " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// header is the part of every document needed to pick its type.
type header struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// Parse decodes every document of one file. file is used for Source and
// World; an object after a helm template "# Source:" comment keeps its file
// and line and names that template in Source.Template.
func Parse(file string, data []byte) ([]Object, []error) {
	objs, errs := parse(file, data)
	for i := range objs {
		objs[i].World = file
	}
	return objs, errs
}

func parse(file string, data []byte) ([]Object, []error) {
	if !looksLikeJSON(data) {
		return parseYAML(file, data)
	}
	objs, errs, firstErr := parseJSONStream(file, data)
	if firstErr == nil {
		return objs, errs
	}
	// YAML is a superset of JSON (flow mappings without quotes): try it.
	objs, errs = parseYAML(file, data)
	if len(objs) == 0 && len(errs) > 0 {
		// Not YAML either: JSON's error has the precise position.
		return nil, []error{firstErr}
	}
	return objs, errs
}

func parseYAML(file string, data []byte) ([]Object, []error) {
	docs := splitYAML(data)
	results := make([]decoded, len(docs))
	forEach(len(docs), func(i int) {
		src := Source{File: file, Line: docs[i].line}
		text := &docText{data: docs[i].data, line: docs[i].line}
		src.loc = &locator{doc: text}
		if r, ok := fastDecode(src, text); ok {
			results[i] = r
		} else {
			j, err := yaml.YAMLToJSON(docs[i].data)
			if err != nil {
				results[i].errs = []error{yamlError(src.Plain(), bytes.Count(docs[i].data, []byte("\n"))+1, err)}
				return
			}
			results[i] = decodeJSON(src, j)
		}
		for k := range results[i].objs {
			results[i].objs[k].Source.Template = docs[i].source
		}
	})
	return collect(results)
}

// decoded is the outcome of one document (a List yields several objects).
type decoded struct {
	objs []Object
	errs []error
}

func collect(results []decoded) ([]Object, []error) {
	var objs []Object
	var errs []error
	for _, r := range results {
		objs = append(objs, r.objs...)
		errs = append(errs, r.errs...)
	}
	return objs, errs
}

// forEach runs fn for 0..n-1, in parallel when the input is large enough to
// pay for the goroutines. Decoding dominates the analyzer's run time and the
// documents are independent.
func forEach(n int, fn func(int)) {
	workers := runtime.GOMAXPROCS(0)
	if n < 64 || workers < 2 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// decodeJSON decodes one document already in JSON form.
func decodeJSON(src Source, j []byte) decoded {
	var out decoded
	decodeValue(src, j, header{}, 0, &out)
	return out
}

// decodeValue decodes one JSON value. def supplies apiVersion and kind for
// the items of typed lists (DeploymentList items may omit them).
func decodeValue(src Source, j []byte, def header, depth int, out *decoded) {
	j = bytes.TrimSpace(j)
	if len(j) == 0 || bytes.Equal(j, []byte("null")) {
		return
	}
	if j[0] == '[' { // a bare JSON or YAML sequence of objects
		var items []json.RawMessage
		if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &items); err != nil {
			out.errs = append(out.errs, &ParseError{Source: src.Plain(), Err: err})
			return
		}
		decodeItems(src, "", items, def, depth, out)
		return
	}
	if j[0] != '{' {
		return // a scalar document is not an object; nothing to check
	}
	var h header
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &h); err != nil {
		out.errs = append(out.errs, &ParseError{Source: src.Plain(), Err: fmt.Errorf("read apiVersion and kind: %w", err)})
		return
	}
	if h.Kind == "" {
		h.Kind = def.Kind
	}
	if h.APIVersion == "" {
		h.APIVersion = def.APIVersion
	}
	if strings.HasSuffix(h.Kind, "List") && h.Items != nil {
		item := header{APIVersion: h.APIVersion, Kind: strings.TrimSuffix(h.Kind, "List")}
		if h.Kind == "List" {
			item = header{}
		}
		decodeItems(src, "items", h.Items, item, depth, out)
		return
	}
	obj := newTyped(h.APIVersion, h.Kind)
	if obj == nil {
		return
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, obj); err != nil {
		out.errs = append(out.errs, &ParseError{Source: src.Plain(), Err: fmt.Errorf("decode %s: %w", h.Kind, err)})
		return
	}
	out.objs = append(out.objs, Object{Source: src, Kind: h.Kind, Obj: obj})
}

// decodeItems decodes a List's items (field "items") or a bare sequence's
// elements (field ""), each with its own line.
func decodeItems(src Source, field string, items []json.RawMessage, def header, depth int, out *decoded) {
	if depth >= maxListDepth {
		out.errs = append(out.errs, &ParseError{Source: src.Plain(), Err: errors.New("lists nested too deeply")})
		return
	}
	for i, it := range items {
		steps := []string{strconv.Itoa(i)}
		if field != "" {
			steps = []string{field, strconv.Itoa(i)}
		}
		decodeValue(src.item(steps...), it, def, depth+1, out)
	}
}

// newTyped returns a pointer to the typed struct for a kind, or nil for kinds
// the analyzer does not read. The API group is checked so that a custom
// resource that happens to be called "Service" (Knative) is not taken for a
// core Service; an empty apiVersion is accepted for hand-written snippets.
func newTyped(apiVersion, kind string) any {
	group := ""
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		group = apiVersion[:i]
	}
	lenient := apiVersion == ""
	in := func(groups ...string) bool {
		if lenient {
			return true
		}
		for _, g := range groups {
			if g == group {
				return true
			}
		}
		return false
	}
	switch kind {
	case KindDeployment:
		if in("apps", "extensions") {
			return &appsv1.Deployment{}
		}
	case KindStatefulSet:
		if in("apps") {
			return &appsv1.StatefulSet{}
		}
	case KindDaemonSet:
		if in("apps", "extensions") {
			return &appsv1.DaemonSet{}
		}
	case KindReplicaSet:
		if in("apps", "extensions") {
			return &appsv1.ReplicaSet{}
		}
	case KindPod:
		if in("") {
			return &corev1.Pod{}
		}
	case KindService:
		if in("") {
			return &corev1.Service{}
		}
	case KindNamespace:
		if in("") {
			return &corev1.Namespace{}
		}
	case KindPDB:
		if in("policy") {
			return &policyv1.PodDisruptionBudget{}
		}
	case KindMutatingWebhook:
		if in("admissionregistration.k8s.io") {
			return &MutatingWebhookConfiguration{}
		}
	case KindHPA:
		// autoscaling/v1 has the same scaleTargetRef and minReplicas.
		if in("autoscaling") {
			return &autoscalingv2.HorizontalPodAutoscaler{}
		}
	}
	return nil
}

// yamlLine matches the position yaml.v2 puts in its syntax errors. The parser
// only sees one document, so its line is relative to the document start; the
// error is rewritten to the file's line so that file:line points at the
// offending line. The message is only reformatted, never branched on.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// lines is the document's line count: yaml.v2 reports errors at the end of
// input one line past it.
func yamlError(src Source, lines int, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
		if n, convErr := strconv.Atoi(msg[m[2]:m[3]]); convErr == nil && n > 0 {
			src.Line += min(n, lines) - 1
			return &ParseError{Source: src, Err: &syntaxError{msg: msg[m[1]:], err: err}}
		}
	}
	return &ParseError{Source: src, Err: &syntaxError{msg: msg, err: err}}
}

// syntaxError is a YAML syntax error whose message had its relative position
// removed (the ParseError's Source carries the absolute one).
type syntaxError struct {
	msg string
	err error
}

func (e *syntaxError) Error() string { return "invalid YAML: " + e.msg }
func (e *syntaxError) Unwrap() error { return e.err }
