package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Command is a command run to its end.
type Command struct {
	Name string
	Args []string
	Dir  string   // "" is this process's working directory
	Env  []string // nil inherits this process's environment
}

// Output runs c and returns its stdout; a failure's error carries stderr.
// Cancelling ctx kills the command.
func Output(ctx context.Context, c Command) ([]byte, error) { return OutputLogging(ctx, c, nil) }

// OutputLogging is Output that also copies the command's stderr to log as
// it comes (nil: nowhere): a build script's progress, which a caller that
// may wait minutes for it shows.
func OutputLogging(ctx context.Context, c Command, log io.Writer) ([]byte, error) {
	cmd := c.exec(ctx)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, log)
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &OutputError{Command: c, Err: err, Stderr: bytes.TrimSpace(stderr.Bytes())}
	}
	return stdout.Bytes(), nil
}

// OutputError is Output's failure: the command, how it failed, and its
// stderr, for a caller that reports only part of it.
type OutputError struct {
	Command Command
	Err     error
	Stderr  []byte
}

func (e *OutputError) Error() string { return fmt.Sprintf("%s: %v: %s", e.Command, e.Err, e.Stderr) }
func (e *OutputError) Unwrap() error { return e.Err }

// CombinedOutput runs c and returns its stdout and stderr together; a
// failure's error carries them too.
func CombinedOutput(ctx context.Context, c Command) ([]byte, error) {
	out, err := c.exec(ctx).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", c, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Run runs c for its effect; a failure's error carries its output.
func Run(ctx context.Context, c Command) error {
	_, err := CombinedOutput(ctx, c)
	return err
}

func (c Command) exec(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	return cmd
}

// String is the command line, for errors.
func (c Command) String() string {
	return strings.Join(append([]string{c.Name}, c.Args...), " ")
}
