package manifest

import (
	"strconv"
	"strings"
	"sync"

	yaml "go.yaml.in/yaml/v3"
)

// docText is one document's text, parsed into a position tree only when a
// line inside it is asked for (a List item's, a finding's field): decoding
// goes through sigs.k8s.io/yaml, which keeps no positions, and most documents
// never need one.
type docText struct {
	data []byte
	line int // the file's line of data's first line

	once sync.Once
	root *yaml.Node
}

func (d *docText) node() *yaml.Node {
	d.once.Do(func() {
		var n yaml.Node
		if err := yaml.Unmarshal(d.data, &n); err != nil {
			return // no field lines: findings keep the object's line
		}
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			d.root = n.Content[0]
		}
	})
	return d.root
}

// setRoot gives the document the position tree the fast path parsed it
// into, so that it is not parsed a second time.
func (d *docText) setRoot(root *yaml.Node) {
	d.once.Do(func() { d.root = root })
}

// locator places an object inside its document: base is the path from the
// document's root to the object (empty, or "items", "3" for a List item).
type locator struct {
	doc  *docText
	base []string
}

// item returns the Source of a List item or sequence element: its own line,
// and a locator to find fields below it.
func (s Source) item(steps ...string) Source {
	if s.loc == nil {
		return s
	}
	loc := &locator{doc: s.loc.doc, base: append(append([]string(nil), s.loc.base...), steps...)}
	if n, line := find(s.loc.doc.node(), loc.base); n != nil {
		s.Line = s.loc.doc.line + line - 1
	}
	s.loc = loc
	return s
}

// Field returns the line of the first of paths found in the object, each a
// path of mapping keys, sequence indexes and "key=value" steps that pick the
// sequence element whose key is value ("containers", "name=web"). It returns
// the object's line when none is found or the object has no text (it came
// from a cluster or a helm template).
func (s Source) Field(paths ...[]string) int {
	if s.loc == nil || s.Line <= 0 {
		return s.Line
	}
	for _, p := range paths {
		full := append(append([]string(nil), s.loc.base...), p...)
		if n, line := find(s.loc.doc.node(), full); n != nil {
			return s.loc.doc.line + line - 1
		}
	}
	return s.Line
}

// Plain drops the locator, so that Sources compare by their fields.
func (s Source) Plain() Source { s.loc = nil; return s }

// find walks path from n and returns the node reached and its line: a
// mapping key's line for a field (where "strategy:" is written), an
// element's own line for a sequence element.
func find(n *yaml.Node, path []string) (*yaml.Node, int) {
	if n == nil {
		return nil, 0
	}
	line := n.Line
	for _, step := range path {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					next, line = n.Content[i+1], n.Content[i].Line
					break
				}
			}
			if next == nil {
				return nil, 0
			}
			n = next
		case yaml.SequenceNode:
			var next *yaml.Node
			if key, value, ok := strings.Cut(step, "="); ok {
				for _, e := range n.Content {
					if v, _ := find(e, []string{key}); v != nil && v.Value == value {
						next = e
						break
					}
				}
			} else if i, err := strconv.Atoi(step); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
			if next == nil {
				return nil, 0
			}
			n, line = next, next.Line
		default:
			return nil, 0
		}
	}
	return n, line
}
