// Package render writes a zerodrop check report as text for people, JSON for
// scripts (the contract in DESIGN.md) or SARIF 2.1.0 for code-scanning UIs.
package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"zerodrop.dev/zerodrop/internal/check/rules"
)

// Formats accepted by -o.
const (
	FormatText  = "text"
	FormatJSON  = "json"
	FormatSARIF = "sarif"
)

// Options tune the output.
type Options struct {
	// Explain adds each finding's arithmetic (text output only: the JSON
	// shape is a fixed contract).
	Explain bool
	// Provider is shown in the text summary.
	Provider string
}

// Write renders rep in format.
func Write(w io.Writer, format string, rep rules.Report, opt Options) error {
	switch format {
	case FormatText:
		return Text(w, rep, opt)
	case FormatJSON:
		return JSON(w, rep)
	case FormatSARIF:
		return SARIF(w, rep)
	}
	return fmt.Errorf("unknown output format %q (want text, json or sarif)", format)
}

// Text groups the findings by object, each with its fix.
func Text(w io.Writer, rep rules.Report, opt Options) error {
	var b strings.Builder
	prev := ""
	shown := 0
	for _, f := range rep.Findings {
		if f.Suppressed {
			continue
		}
		shown++
		head := f.Object + "  " + f.Source.String()
		if head != prev {
			if prev != "" {
				b.WriteByte('\n')
			}
			b.WriteString(head + "\n")
			prev = head
		}
		fmt.Fprintf(&b, "  %-7s %s  %s\n", f.Severity, f.Rule, f.Message)
		fmt.Fprintf(&b, "                 fix: %s\n", f.Fix)
		if opt.Explain {
			for _, e := range f.Explain {
				fmt.Fprintf(&b, "                 explain: %s\n", e)
			}
		}
	}
	if shown > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(summary(rep, opt.Provider) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func summary(rep rules.Report, provider string) string {
	scope := fmt.Sprintf("%s selected by %s, provider %s",
		plural(rep.Workloads, "workload"), plural(rep.Services, "LoadBalancer Service"), provider)
	if n := rep.Suppressed(); n > 0 {
		scope = fmt.Sprintf("%d suppressed, %s", n, scope)
	}
	shown := len(rep.Findings) - rep.Suppressed()
	if shown == 0 {
		return "zerodrop check: no findings (" + scope + ")"
	}
	errs := rep.Errors()
	return fmt.Sprintf("zerodrop check: %s, %s (%s)",
		plural(errs, "error"), plural(shown-errs, "warning"), scope)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// jsonFinding is the contract's finding shape; field order is the contract's.
// Template, the chart template of a helm template "# Source:" comment, is an
// addition to it, present only when there is one.
type jsonFinding struct {
	Rule      string `json:"rule"`
	Severity  string `json:"severity"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Object    string `json:"object"`
	Container string `json:"container"`
	Message   string `json:"message"`
	Fix       string `json:"fix"`
	Template  string `json:"template,omitempty"`
}

// JSON prints {"findings":[…]}; an empty report prints an empty array, not
// null. Suppressed findings are left out: the shape is a fixed contract.
//
// The findings are encoded one at a time into a buffer written out as it
// fills, byte for byte what encoding the whole report with encode gives
// ({"findings": [...]} indented by two spaces): one large report otherwise
// costs a copy of the whole output for the indentation, and its growth.
func JSON(w io.Writer, rep rules.Report) error {
	rep.ResolveLines()
	bw := bufio.NewWriterSize(w, 64<<10)
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	enc.SetEscapeHTML(false) // as encode: messages quote shell commands
	enc.SetIndent("    ", "  ")
	n := 0
	for _, f := range rep.Findings {
		if f.Suppressed {
			continue
		}
		one.Reset()
		if err := enc.Encode(jsonFinding{
			Rule: f.Rule, Severity: string(f.Severity), File: f.Source.File, Line: f.Line, Object: f.Object,
			Container: f.Container, Message: f.Message, Fix: f.Fix, Template: f.Source.Template,
		}); err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		if n == 0 {
			bw.WriteString("{\n  \"findings\": [\n    ")
		} else {
			bw.WriteString(",\n    ")
		}
		bw.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
		n++
	}
	if n == 0 {
		bw.WriteString("{\n  \"findings\": []\n}\n")
	} else {
		bw.WriteString("\n  ]\n}\n")
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}

func encode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages quote shell commands: keep && and <
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}
