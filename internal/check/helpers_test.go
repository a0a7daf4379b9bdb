package check_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// run runs zerodrop check with args and stdin.
func run(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	var in io.Reader = strings.NewReader(stdin)
	code := check.Run(context.Background(), args, in, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}
