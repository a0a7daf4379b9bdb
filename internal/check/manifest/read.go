package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// StdinName is the file of objects read from stdin: "-", the path as given
// on the command line (Source.String calls it "stdin").
const StdinName = "-"

// Read reads every path: "-" is stdin, a directory is walked recursively for
// .yaml, .yml and .json files (hidden directories such as .git are skipped),
// anything else is read as one manifest file whatever its extension. Errors
// never stop the other paths or documents.
func Read(paths []string, stdin io.Reader) ([]Object, []error) {
	var objs []Object
	var errs []error
	add := func(o []Object, e []error) {
		objs = append(objs, o...)
		errs = append(errs, e...)
	}
	for _, p := range paths {
		if p == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				errs = append(errs, &ParseError{Source: Source{File: StdinName}, Err: fmt.Errorf("read: %w", err)})
				continue
			}
			add(Parse(StdinName, data))
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			errs = append(errs, &ParseError{Source: Source{File: p}, Err: unwrapPath(err)})
			continue
		}
		if !info.IsDir() {
			add(readFile(p))
			continue
		}
		walkErr := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				errs = append(errs, &ParseError{Source: Source{File: path}, Err: unwrapPath(err)})
				return nil
			}
			if d.IsDir() {
				if path != p && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if isChart(path) {
					add(readChart(path))
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				add(readFile(path))
			}
			return nil
		})
		if walkErr != nil {
			errs = append(errs, &ParseError{Source: Source{File: p}, Err: walkErr})
		}
	}
	return objs, errs
}

func readFile(path string) ([]Object, []error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{&ParseError{Source: Source{File: path}, Err: unwrapPath(err)}}
	}
	return Parse(path, data)
}

// unwrapPath drops the *fs.PathError layer, whose path the ParseError already
// prints, keeping the cause ("no such file or directory").
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// looksLikeJSON reports whether data starts with a JSON object or array.
func looksLikeJSON(data []byte) bool {
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
	return len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
}

// parseJSONStream decodes data as a stream of JSON values (kubectl get -o json
// prints one; some tools concatenate several). When the first value is not
// valid JSON it returns only firstErr, for the caller to try YAML instead.
func parseJSONStream(file string, data []byte) (objs []Object, errs []error, firstErr error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var (
		results []decoded
		values  [][]byte
		lines   []int
		line    = 1
		counted int64 // bytes of data whose newlines are in line
	)
	for {
		start := skipSpace(data, dec.InputOffset())
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			off := start
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off = se.Offset
			}
			line += lineAt(data[counted:], off-counted) - 1
			perr := &ParseError{Source: Source{File: file, Line: line}, Err: fmt.Errorf("invalid JSON: %w", err)}
			if len(values) == 0 {
				return nil, nil, perr
			}
			errs = append(errs, perr)
			break
		}
		line += lineAt(data[counted:], start-counted) - 1
		counted = start
		values = append(values, raw)
		lines = append(lines, line)
	}
	results = make([]decoded, len(values))
	forEach(len(values), func(i int) {
		src := Source{File: file, Line: lines[i]}
		src.loc = &locator{doc: &docText{data: values[i], line: lines[i]}}
		results[i] = decodeJSON(src, values[i])
	})
	o, e := collect(results)
	return o, append(e, errs...), nil
}

// skipSpace returns the offset of the first non-whitespace byte at or after off.
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) {
		switch data[off] {
		case ' ', '\t', '\r', '\n':
			off++
		default:
			return off
		}
	}
	return off
}
