package manifest

import (
	"bytes"
)

// document is one YAML document of a stream and the 1-based line of its first
// content line (the line a reader expects a finding or an error to point at:
// helm template's "# Source:" comments and blank lines are skipped).
type document struct {
	line int
	data []byte
	// source is the template named by a helm template "# Source: chart/templates/x.yaml"
	// comment before the content, if any.
	source string
}

// sourcePrefix starts the comment helm template writes before each document.
var sourcePrefix = []byte("# Source: ")

// splitYAML cuts a YAML stream at its document markers. It does this itself,
// before any YAML parsing, for two reasons: a syntax error in one document
// must not hide the documents after it (a streaming decoder stops at the
// first error), and each document's starting line must be known to report
// file:line. A marker is "---" or "..." at column 0 followed by whitespace or
// the end of the line; YAML forbids such a line inside content, so no scalar
// can contain one.
func splitYAML(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var (
		docs   []document
		cur    []byte
		start  int // line of the first content line of cur, 0 while none
		lineNo int
		source string
	)
	flush := func() {
		if start > 0 {
			docs = append(docs, document{line: start, data: cur, source: source})
		}
		cur, start, source = nil, 0, ""
	}
	for len(data) > 0 {
		lineNo++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			line, data = data, nil
		}
		if rest, ok := marker(line, "---"); ok {
			flush()
			// "--- {kind: Pod}" or "--- |" carry content on the marker line.
			if !isBlankOrComment(rest) {
				start = lineNo
				cur = append(cur, rest...)
			}
			continue
		}
		if _, ok := marker(line, "..."); ok {
			flush()
			continue
		}
		if start == 0 {
			// Directives ("%YAML 1.2") belong before a document's marker;
			// keep them out of the content so the parser sees a plain body.
			if isBlankOrComment(line) || line[0] == '%' {
				if bytes.HasPrefix(line, sourcePrefix) {
					source = string(bytes.TrimSpace(line[len(sourcePrefix):]))
				}
				continue
			}
			start = lineNo
		}
		cur = append(cur, line...)
	}
	flush()
	return docs
}

// marker reports whether line is the document marker m, and returns what
// follows the marker on the same line.
func marker(line []byte, m string) ([]byte, bool) {
	if !bytes.HasPrefix(line, []byte(m)) {
		return nil, false
	}
	rest := line[len(m):]
	if len(rest) == 0 {
		return rest, true
	}
	switch rest[0] {
	case ' ', '\t', '\r', '\n':
		return rest, true
	}
	return nil, false
}

// isBlankOrComment reports whether a line holds nothing a YAML parser would
// turn into content.
func isBlankOrComment(line []byte) bool {
	t := bytes.TrimLeft(line, " \t\r\n")
	return len(t) == 0 || t[0] == '#'
}

// lineAt returns the 1-based line of byte offset off in data.
func lineAt(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}
