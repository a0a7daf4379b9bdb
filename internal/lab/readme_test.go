package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// labInvocation is how `make lab` calls the lab (the Makefile's recipe) and
// how the docs call it directly.
const labInvocation = "go run -tags lab ./cmd/zerodrop lab"

// TestDocLabCommands runs every lab command README.md and docs/lab.md show
// (`make lab …`, `zerodrop lab …`, `go run -tags lab ./cmd/zerodrop lab …`,
// in code blocks and code spans) with --dry-run, which checks the flags and
// scenarios and starts nothing: an example a reader copies must not end in
// a usage error. `make lab` lines go through `make -n`, so the Makefile's
// own defaults (LAB_INSTALL, LAB_FLAGS) are what is checked. Synopses with
// optional parts ("[--keep]", "<args>") are not commands and are left out.
func TestDocLabCommands(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]int{}
	for _, doc := range []string{"README.md", "docs/lab.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range labCommands(string(b)) {
			args, err := labArgs(root, cmd)
			if err != nil {
				t.Errorf("%s: %q: %v", doc, cmd, err)
				continue
			}
			if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				// A subcommand the lab's own pods run (upstream-controller,
				// azure-controller), named in the docs, not an example.
				continue
			}
			var stdout, stderr bytes.Buffer
			if code := Run(context.Background(), append(args, "--dry-run"), &stdout, &stderr); code != 0 {
				t.Errorf("%s: %q (lab %q) exits %d with --dry-run:\n%s", doc, cmd, args, code, stderr.String())
				continue
			}
			if !strings.Contains(stdout.String(), "--dry-run") {
				t.Errorf("%s: %q: no plan printed:\n%s", doc, cmd, stdout.String())
			}
			t.Logf("%s: %s: lab %s: ok", doc, cmd, strings.Join(args, " "))
			checked[doc]++
		}
	}
	// The README shows plain `make lab` and a `make lab LAB_FLAGS=…`;
	// docs/lab.md `make lab` and two direct calls at least.
	if checked["README.md"] < 2 || checked["docs/lab.md"] < 3 {
		t.Errorf("lab commands checked per document %v: fewer than the docs show (is the extraction broken?)", checked)
	}
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	labPrefix = regexp.MustCompile(`^(make lab\b|zerodrop lab\b|` + regexp.QuoteMeta(labInvocation) + `\b)`)
)

// labCommands are the lab commands of a Markdown document: lines of fenced
// code blocks and code spans that start with one, a shell comment cut off.
func labCommands(doc string) []string {
	var out []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if i := strings.Index(s, " #"); i >= 0 {
			s = strings.TrimSpace(s[:i])
		}
		if labPrefix.MatchString(s) && !strings.ContainsAny(s, "[…<") {
			out = append(out, s)
		}
	}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			add(line)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
	}
	return out
}

// labArgs turns a documented command into the arguments of `zerodrop lab`:
// a `make lab …` line as `make -n` expands the Makefile's recipe with it.
func labArgs(root, cmd string) ([]string, error) {
	words, err := shellWords(cmd)
	if err != nil {
		return nil, err
	}
	switch {
	case words[0] == "zerodrop":
		return words[2:], nil
	case words[0] == "go":
		return words[len(strings.Fields(labInvocation)):], nil
	}
	ctx, cancel := context.WithTimeout(interrupted, time.Minute)
	defer cancel()
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "make", Args: append([]string{"-n", "--no-print-directory"}, words[1:]...), Dir: root})
	if err != nil {
		return nil, fmt.Errorf("make -n: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), labInvocation); ok {
			return shellWords(rest)
		}
	}
	return nil, fmt.Errorf("make -n prints no %q line:\n%s", labInvocation, out)
}

// shellWords splits s as a POSIX shell splits a simple command: blanks
// separate words, single and double quotes group, a backslash escapes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, c := range s {
		switch {
		case escaped:
			cur.WriteRune(c)
			escaped = false
		case c == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
