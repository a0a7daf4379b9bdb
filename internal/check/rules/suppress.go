package rules

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// parseIgnore reads a zerodrop.dev/ignore value: entries separated by ";" or
// new lines, each "IDs: reason" with the IDs separated by commas or spaces
// ("ZD301: single replica by design; ZD303, ZD304: a batch job"). A rule
// is only suppressed with a reason: a suppression nobody can explain later
// is how real hazards get switched off for good. IDs without one are
// returned in bare.
func parseIgnore(raw string) (reasons map[string]string, bare []string) {
	reasons = map[string]string{}
	for _, entry := range strings.FieldsFunc(raw, func(r rune) bool { return r == ';' || r == '\n' }) {
		ids, reason, _ := strings.Cut(entry, ":")
		reason = strings.TrimSpace(reason)
		for _, id := range strings.FieldsFunc(ids, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			id = strings.ToUpper(id)
			if reason == "" {
				bare = append(bare, id)
				continue
			}
			reasons[id] = reason
		}
	}
	return reasons, bare
}

// ignored returns the rules an object's zerodrop.dev/ignore annotation
// suppresses, with their reasons.
func ignored(meta *metav1.ObjectMeta) map[string]string {
	reasons, _ := parseIgnore(meta.Annotations[IgnoreAnnotation])
	return reasons
}

// ignoreNotes says, for stderr, which suppressions lack a reason and so
// suppress nothing.
func ignoreNotes(ix *index) []string {
	var notes []string
	note := func(src manifest.Source, object string, meta *metav1.ObjectMeta) {
		raw, ok := meta.Annotations[IgnoreAnnotation]
		if !ok {
			return
		}
		if _, bare := parseIgnore(raw); len(bare) > 0 {
			slices.Sort(bare)
			notes = append(notes, fmt.Sprintf(`%s: %s: %s %q suppresses nothing for %s: a suppression needs a reason, as in "%s: why it is safe"`,
				src.Plain(), object, IgnoreAnnotation, raw, strings.Join(slices.Compact(bare), ", "), bare[0]))
		}
	}
	for _, w := range ix.workloads {
		note(w.src, w.id(), w.meta)
	}
	for _, s := range ix.lbServices {
		note(s.src, s.id(), &s.svc.ObjectMeta)
	}
	return notes
}
