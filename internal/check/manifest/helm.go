package manifest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// SkippedError is an input that was deliberately not read (a Helm chart
// without helm on PATH). It is reported, but it is not a parse error and
// does not change the exit status.
type SkippedError struct {
	Path   string
	Reason string
}

func (e *SkippedError) Error() string { return "skipped " + e.Path + ": " + e.Reason }

// isChart reports whether dir is a Helm chart: its templates are Go templates,
// not manifests, and parsing them would only produce errors.
func isChart(dir string) bool {
	info, err := os.Stat(filepath.Join(dir, "Chart.yaml"))
	return err == nil && info.Mode().IsRegular()
}

// readChart renders a chart with the helm command (the Helm SDK is not linked
// in: it would double the binary for one input format). The rendering is one
// world, and each object is placed on its template file in the chart, without
// a line: the rendering is no file, and its lines are not the template's.
func readChart(dir string) ([]Object, []error) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		return nil, []error{&SkippedError{Path: dir, Reason: fmt.Sprintf(
			"a Helm chart, and helm is not on PATH; render it and pipe it in: helm template %s | zerodrop check -", dir)}}
	}
	out, err := supervisor.Output(context.Background(), supervisor.Command{Name: helm, Args: []string{"template", dir}})
	if err != nil {
		// helm's first line of stderr says why; the rest is its usage.
		cause, msg := err, ""
		var oe *supervisor.OutputError
		if errors.As(err, &oe) {
			cause, msg = oe.Err, string(oe.Stderr)
		}
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return nil, []error{&ParseError{Source: Source{File: dir}, Err: fmt.Errorf("helm template: %w: %s", cause, msg)}}
	}
	objs, errs := Parse("helm template "+dir, out)
	for i := range objs {
		if s := &objs[i].Source; s.Template != "" {
			*s = Source{File: chartFile(dir, s.Template)}
		}
	}
	return objs, errs
}

// chartFile maps a "# Source:" path, which starts with the chart's name
// (web/templates/x.yaml, web/charts/db/templates/y.yaml), to the file in dir.
func chartFile(dir, source string) string {
	_, rest, ok := strings.Cut(filepath.ToSlash(source), "/")
	if !ok || rest == "" || strings.HasPrefix(rest, "../") {
		return source
	}
	return filepath.Join(dir, filepath.FromSlash(rest))
}

// IsSkipped reports whether err only says that an input was skipped.
func IsSkipped(err error) bool {
	var s *SkippedError
	return errors.As(err, &s)
}
