package check

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

// analyzeWorlds analyzes each world (a file, stdin, a rendered chart; the
// whole cluster) on its own: a Service of one manifest must not select the
// workloads of an unrelated manifest that happens to use the same labels.
// Worlds keep the order of their first object, which is the input order.
// notes are the duplicates dropped, for stderr.
func analyzeWorlds(objs []manifest.Object, cfg rules.Config) (rep rules.Report, notes []string) {
	var order []string
	worlds := map[string][]manifest.Object{}
	for _, o := range objs {
		if _, ok := worlds[o.World]; !ok {
			order = append(order, o.World)
		}
		worlds[o.World] = append(worlds[o.World], o)
	}
	for _, w := range order {
		kept, dups := dedupe(worlds[w])
		notes = append(notes, dups...)
		r := rules.Analyze(kept, cfg)
		rep.Findings = append(rep.Findings, r.Findings...)
		rep.Workloads += r.Workloads
		rep.Services += r.Services
		rep.Notes = append(rep.Notes, r.Notes...)
	}
	return rep, notes
}

// dedupe keeps the first of several objects with the same kind, namespace and
// name in one world (a stream that concatenates two renderings of a chart):
// the API server would keep one of them, and reporting each would repeat
// every finding.
func dedupe(objs []manifest.Object) (kept []manifest.Object, notes []string) {
	first := make(map[string]manifest.Source, len(objs))
	kept = make([]manifest.Object, 0, len(objs))
	for _, o := range objs {
		m, ok := o.Obj.(metav1.Object)
		if !ok {
			kept = append(kept, o)
			continue
		}
		ns := m.GetNamespace()
		if ns == "" && o.Kind != manifest.KindNamespace {
			ns = metav1.NamespaceDefault
		}
		id := o.Kind + "/" + ns + "/" + m.GetName()
		if o.Kind == manifest.KindNamespace {
			id = o.Kind + "/" + m.GetName()
		}
		if prev, dup := first[id]; dup {
			notes = append(notes, fmt.Sprintf("%s: %s duplicates %s: checked once, as the first", o.Source, id, prev))
			continue
		}
		first[id] = o.Source
		kept = append(kept, o)
	}
	return kept, notes
}
