package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The one package of each mechanism (issue 30): processes are started only
// by internal/supervisor, Prometheus text is parsed only by
// internal/promtext, HAProxy's runtime API is spoken only by the HAProxy
// provider (whose ReadStat is the lab's reader of `show stat`).
// internal/lab/upstream is left out: it is the baseline that shares no code
// with zerodrop (its own imports test keeps it so), so it has its own.
const (
	supervisorPkg = "internal/supervisor"
	promtextPkg   = "internal/promtext"
	haproxyPkg    = "internal/provider/haproxy"
	upstreamPkg   = "internal/lab/upstream"
)

// processStartAllowed are the files outside the supervisor that may start a
// process, each with why.
var processStartAllowed = map[string]string{
	"internal/provider/haproxy/process.go": "production: the HAProxy master outlives the controller " +
		"(its own session, handed over through its PID file), and `haproxy -c` validates a configuration " +
		"in the production binary; see the comment at its start",
}

// TestOneOfEachMechanism walks the non-test Go sources and fails on a
// process start (os/exec's Command or CommandContext, os.StartProcess,
// syscall.ForkExec) outside the supervisor, an HAProxy runtime API command
// outside the HAProxy provider, or a parse of Prometheus metrics text (the
// expfmt parser, or a float read in a file that names a metric) outside
// promtext.
func TestOneOfEachMechanism(t *testing.T) {
	root := filepath.Join("..", "..")
	var files int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || under(rel, upstreamPkg) {
			return nil
		}
		files++
		for _, problem := range mechanisms(t, path, rel) {
			t.Errorf("%s: %s", rel, problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files found under %s: the walk is broken", files, root)
	}
}

// under reports whether rel is in the directory pkg (not a subdirectory).
func under(rel, pkg string) bool {
	return filepath.ToSlash(filepath.Dir(rel)) == pkg || strings.HasPrefix(rel, pkg+"/")
}

// haproxyCommand matches a string that starts with an HAProxy runtime API
// command (after the master CLI's routing prefix, "@1 " or "@!PID ").
var haproxyCommand = regexp.MustCompile(`^(@!?[0-9%d]+ )?(show (stat|servers|info|proc|map|sess|table|backend)|(set|add|del|enable|disable) (server|health|agent|map|weight|maxconn)|shutdown (sessions|session|frontend))\b`)

// metricName matches a string naming a Prometheus sample by its suffix.
var metricName = regexp.MustCompile(`^[a-z][a-z0-9_]*_(total|bytes|seconds|status|count|sum|bucket)\b|# (TYPE|HELP) `)

// mechanisms lists what the file at path does that belongs to another
// package's one mechanism.
func mechanisms(t *testing.T, path, rel string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", rel, err)
	}
	imports := map[string]string{} // local name → import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
		if p == "github.com/prometheus/common/expfmt" && !under(rel, promtextPkg) {
			// Writing the format (an encoder) is not reading it; nothing here does either yet.
			return []string{"imports expfmt: parse metrics text with internal/promtext"}
		}
	}
	var problems []string
	var floatParse, namesMetric bool
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			call := imports[x.Name] + "." + sel.Sel.Name
			switch call {
			case "os/exec.Command", "os/exec.CommandContext", "os.StartProcess", "syscall.ForkExec", "syscall.StartProcess":
				if !under(rel, supervisorPkg) && processStartAllowed[rel] == "" {
					problems = append(problems, "starts a process ("+call+"): use internal/supervisor, or add the file to processStartAllowed with its reason")
				}
			case "strconv.ParseFloat":
				floatParse = true
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if haproxyCommand.MatchString(s) && !under(rel, haproxyPkg) {
				problems = append(problems, "sends an HAProxy runtime API command ("+strconv.Quote(s)+"): read through internal/provider/haproxy (ReadStat)")
			}
			if metricName.MatchString(s) {
				namesMetric = true
			}
		}
		return true
	})
	if floatParse && namesMetric && !under(rel, promtextPkg) {
		problems = append(problems, "reads a float in a file that names a metric: parse metrics text with internal/promtext")
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}
