package haproxyrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// ValidatorCommand is the argument of `zerodrop haproxy` that runs the
// configuration validator; `zerodrop haproxy` starts it itself, before it
// becomes HAProxy's master, on a socket it opened (haproxy.ServeValidation):
// the replica's zerodrop process asks it to run `haproxy -c` on each
// configuration before a reload, so that the check's memory is charged to
// this container, not to the replica's (--haproxy-validate-socket).
const ValidatorCommand = "validator"

// validatorFD is the descriptor the validator finds its listening socket
// at: the first of exec.Cmd.ExtraFiles.
const validatorFD = 3

// ValidatorConfig is `zerodrop haproxy validator`'s flags.
type ValidatorConfig struct {
	Dir, Binary string
	// Parent is the process the validator serves beside (HAProxy's master,
	// which `zerodrop haproxy` becomes): when it is gone, so is the
	// validator.
	Parent int
}

func validatorFlags(c *ValidatorConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("zerodrop haproxy validator", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Dir, "dir", DefaultDir, "state directory: only its files are checked")
	fs.StringVar(&c.Binary, "binary", "haproxy", "HAProxy executable that checks them (-c)")
	fs.IntVar(&c.Parent, "parent", 0, "exit when this process is no longer the validator's parent (0: never)")
	return fs
}

// RunValidator is `zerodrop haproxy validator`: it serves checks on the
// socket inherited at descriptor 3 until its parent is gone or it is
// signalled.
func RunValidator(args []string, stderr io.Writer) int {
	var c ValidatorConfig
	fs := validatorFlags(&c, stderr)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop haproxy validator: unexpected arguments %v\n", fs.Args())
		return 2
	}
	ln, err := net.FileListener(os.NewFile(validatorFD, haproxy.ValidationSocketName))
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy validator: no socket at descriptor %d (started by `zerodrop haproxy` only): %v\n", validatorFD, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.Parent > 0 {
		ctx = untilOrphaned(ctx, c.Parent)
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, "zerodrop haproxy validator:", prefix, args) }, funcr.Options{})
	if err := haproxy.ServeValidation(ctx, ln, c.Binary, c.Dir, log); err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy validator: %v\n", err)
		return 1
	}
	return 0
}

// untilOrphaned ends the context once parent is no longer this process's
// parent: outside a container (where the master's end ends every process
// of it) nothing else would end the validator.
func untilOrphaned(ctx context.Context, parent int) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		for os.Getppid() == parent {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return ctx
}

// startValidator opens the validation socket of c.Dir and starts `zerodrop
// haproxy validator` on it, checking with the HAProxy at path, as a child
// of this process, which is about to become HAProxy's master: the socket
// exists before HAProxy does, so the replica never finds HAProxy without
// its validator. The master ignores the end of a child it did not start.
func startValidator(c Config, path string, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	ln, err := haproxy.ListenValidation(c.Dir)
	if err != nil {
		return err
	}
	// The socket stays: the validator serves it once this process is
	// HAProxy.
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	defer f.Close()
	// A file, not a pipe: a pipe's copying goroutine would end with this
	// process's exec.
	out, ok := stderr.(*os.File)
	if !ok {
		out = os.Stderr
	}
	_, err = haproxy.StartDetached(self, []string{"haproxy", ValidatorCommand, "--dir=" + c.Dir, "--binary=" + path, fmt.Sprintf("--parent=%d", os.Getpid())}, f, out)
	if err != nil {
		return fmt.Errorf("validator: %w", err)
	}
	return nil
}
