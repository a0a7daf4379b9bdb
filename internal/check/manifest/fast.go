package manifest

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
)

// The fast path decodes a YAML document from the one go.yaml.in/yaml/v3 parse
// that also gives its positions (docText), instead of sigs.k8s.io/yaml's
// parse with yaml.v2, conversion to JSON and a second parse of that JSON for
// the header: decoding was most of the analyzer's run time. It must decode
// exactly what sigs.k8s.io/yaml would, so it only takes documents where the
// two agree by construction: no tag (no '!' anywhere), anchor, alias or merge
// key, no duplicate key, keys that are strings, and plain scalars resolved as
// yaml.v2 resolves them (YAML 1.1: yes/on/off are booleans), with anything
// numeric but a plain decimal integer left to the slow path. Any other
// document, a parse error, a List, a header that is not two strings or a
// decode error takes the slow path (parseYAML), which keeps its errors and
// their wording. TestFastPathAgrees holds it to sigs.k8s.io/yaml.

// fastDecode decodes one document, or reports false for the slow path. On
// success the document's position tree is kept for Source.Field.
func fastDecode(src Source, doc *docText) (decoded, bool) {
	if bytes.IndexByte(doc.data, '!') >= 0 {
		return decoded{}, false
	}
	var n yaml.Node
	if err := yaml.Unmarshal(doc.data, &n); err != nil {
		return decoded{}, false
	}
	if n.Kind != yaml.DocumentNode || len(n.Content) != 1 {
		return decoded{}, false
	}
	root := n.Content[0]
	if root.Kind != yaml.MappingNode || root.Anchor != "" {
		return decoded{}, false
	}
	var h header
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		var dst *string
		switch k.Value {
		case "kind":
			dst = &h.Kind
		case "apiVersion":
			dst = &h.APIVersion
		case "items":
			return decoded{}, false // a List: the slow path gives each item its line
		default:
			continue
		}
		s, ok := stringScalar(v)
		if !ok {
			return decoded{}, false
		}
		*dst = s
	}
	var out decoded
	obj := newTyped(h.APIVersion, h.Kind)
	if obj == nil {
		// A kind the analyzer does not read: the slow path would skip it too,
		// but only once the whole document is known to convert.
		var w jsonWriter
		if !w.value(root) {
			return decoded{}, false
		}
		return out, true // no object, so no field lines are ever asked for
	}
	// JSON is about as long as the block YAML it comes from: size it once.
	w := jsonWriter{buf: make([]byte, 0, len(doc.data)+len(doc.data)/4)}
	if !w.value(root) {
		return decoded{}, false
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(w.buf, obj); err != nil {
		return decoded{}, false // the slow path words the error
	}
	doc.setRoot(root)
	out.objs = append(out.objs, Object{Source: src, Kind: h.Kind, Obj: obj})
	return out, true
}

// stringScalar returns the string a node decodes to when yaml.v2 would give
// a string.
func stringScalar(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Anchor != "" {
		return "", false
	}
	if n.Style != 0 { // quoted or block: always a string
		return n.Value, true
	}
	r, ok := resolvePlain(n.Value)
	return n.Value, ok && r == resolvedString
}

type resolved int

const (
	resolvedString resolved = iota
	resolvedInt             // a plain decimal integer, written as it is
	resolvedTrue
	resolvedFalse
	resolvedNull
)

// v2Bool and v2Null are yaml.v2's resolve table (resolve.go): the exact
// spellings, no other case mix.
var v2Words = map[string]resolved{
	"y": resolvedTrue, "Y": resolvedTrue, "yes": resolvedTrue, "Yes": resolvedTrue, "YES": resolvedTrue,
	"true": resolvedTrue, "True": resolvedTrue, "TRUE": resolvedTrue,
	"on": resolvedTrue, "On": resolvedTrue, "ON": resolvedTrue,
	"n": resolvedFalse, "N": resolvedFalse, "no": resolvedFalse, "No": resolvedFalse, "NO": resolvedFalse,
	"false": resolvedFalse, "False": resolvedFalse, "FALSE": resolvedFalse,
	"off": resolvedFalse, "Off": resolvedFalse, "OFF": resolvedFalse,
	"": resolvedNull, "~": resolvedNull, "null": resolvedNull, "Null": resolvedNull, "NULL": resolvedNull,
}

// yamlStyleFloat is yaml.v2's float pattern (resolve.go).
var yamlStyleFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolvePlain resolves a plain scalar as yaml.v2 does, reporting false for
// what the fast path leaves to the slow one (floats, infinities, timestamps,
// hexadecimal, octal, binary, underscores, big or signed-zero integers).
func resolvePlain(s string) (resolved, bool) {
	if r, ok := v2Words[s]; ok {
		return r, true
	}
	switch c := s[0]; {
	case c == '.':
		// .inf and .nan are floats; other dotted words are strings unless
		// they parse as a float.
		if _, err := strconv.ParseFloat(s, 64); err == nil || strings.EqualFold(s, ".inf") || strings.EqualFold(s, ".nan") {
			return 0, false
		}
		return resolvedString, true
	case c == '+' || c == '-' || (c >= '0' && c <= '9'):
		if simpleInt(s) {
			return resolvedInt, true
		}
		if len(s) > 4 && s[4] == '-' && allDigits(s[:4]) {
			return 0, false // maybe a timestamp
		}
		plain := strings.ReplaceAll(s, "_", "")
		if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return 0, false
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return 0, false
		}
		if yamlStyleFloat.MatchString(plain) || strings.HasPrefix(plain, "0b") || strings.HasPrefix(plain, "-0b") ||
			strings.HasPrefix(plain, "+.") || strings.HasPrefix(plain, "-.") {
			return 0, false
		}
		return resolvedString, true
	}
	return resolvedString, true
}

// simpleInt: an optional minus and up to 18 digits without a leading zero,
// which yaml.v2 reads as an int and JSON writes the same way.
func simpleInt(s string) bool {
	if s == "0" {
		return true
	}
	d := strings.TrimPrefix(s, "-")
	return len(d) > 0 && len(d) <= 18 && d[0] != '0' && allDigits(d)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// jsonWriter writes a node tree as JSON, or reports false where the fast
// path does not apply.
type jsonWriter struct{ buf []byte }

func (w *jsonWriter) value(n *yaml.Node) bool {
	if n.Anchor != "" {
		return false
	}
	switch n.Kind {
	case yaml.MappingNode:
		return w.mapping(n)
	case yaml.SequenceNode:
		w.buf = append(w.buf, '[')
		for i, e := range n.Content {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			if !w.value(e) {
				return false
			}
		}
		w.buf = append(w.buf, ']')
		return true
	case yaml.ScalarNode:
		if n.Style != 0 {
			w.str(n.Value)
			return true
		}
		r, ok := resolvePlain(n.Value)
		if !ok {
			return false
		}
		switch r {
		case resolvedString:
			w.str(n.Value)
		case resolvedInt:
			w.buf = append(w.buf, n.Value...)
		case resolvedTrue:
			w.buf = append(w.buf, "true"...)
		case resolvedFalse:
			w.buf = append(w.buf, "false"...)
		case resolvedNull:
			w.buf = append(w.buf, "null"...)
		}
		return true
	}
	return false // an alias
}

func (w *jsonWriter) mapping(n *yaml.Node) bool {
	keys := len(n.Content) / 2
	var seen map[string]bool
	if keys > 8 {
		seen = make(map[string]bool, keys)
	}
	w.buf = append(w.buf, '{')
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Style == 0 && k.Value == "<<" {
			return false // a merge key
		}
		key, ok := stringScalar(k)
		if !ok {
			return false // a key yaml.v2 reads as a number, boolean or null
		}
		// A duplicate key: yaml.v2 keeps the last, JSON decoding too, but
		// the fast path does not rely on that.
		if seen != nil {
			if seen[key] {
				return false
			}
			seen[key] = true
		} else {
			for j := 0; j < i; j += 2 {
				if n.Content[j].Value == key {
					return false
				}
			}
		}
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.str(key)
		w.buf = append(w.buf, ':')
		if !w.value(n.Content[i+1]) {
			return false
		}
	}
	w.buf = append(w.buf, '}')
	return true
}

// str writes a JSON string: as it is when nothing needs escaping, through
// encoding/json otherwise (which also replaces invalid UTF-8, as
// sigs.k8s.io/yaml's json.Marshal does).
func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(s)
			w.buf = append(w.buf, b...)
			return
		}
	}
	w.buf = append(w.buf, '"')
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '"')
}
