package haproxyrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// StopCommand is the argument of `zerodrop haproxy` that stops a running
// HAProxy softly instead of starting one: the data-plane pod's preStop
// hooks run it.
const StopCommand = "stop"

// StopConfig is `zerodrop haproxy stop`'s flags.
type StopConfig struct {
	Dir string
	// Wait only waits for the master to exit (the controller container's
	// hook: the haproxy container's own hook stops it).
	Wait bool
	// MarkTimeout is how long Wait waits for the soft stop's mark before
	// it takes the stop for this container's alone (a liveness restart),
	// which must not wait for HAProxy.
	MarkTimeout time.Duration
	// Timeout bounds the wait; 0: until the master exits (the kubelet
	// ends the hook at the pod's grace period anyway).
	Timeout time.Duration
}

func stopFlags(c *StopConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("zerodrop haproxy stop", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Dir, "dir", DefaultDir, "state directory of the HAProxy to stop (its master socket DIR/master.sock)")
	fs.BoolVar(&c.Wait, "wait", false, "do not stop HAProxy, only wait until its master has exited (the master socket no longer answers): the preStop hook of a container beside the haproxy container")
	fs.DurationVar(&c.Timeout, "timeout", 0, "give up waiting after this long (exit 1); 0: wait until the master exits")
	fs.DurationVar(&c.MarkTimeout, "mark-timeout", 5*time.Second, "with --wait: when HAProxy has not been told to stop softly within this time (the mark that stop leaves in --dir), return at once: the kubelet stops this container alone (a liveness restart), not the pod, and HAProxy keeps running")
	return fs
}

// ParseStop parses `zerodrop haproxy stop`'s arguments (after "stop").
func ParseStop(args []string, out io.Writer) (StopConfig, error) {
	var c StopConfig
	fs := stopFlags(&c, out)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return c, nil
}

// RunStop is `zerodrop haproxy stop`: HAProxy's soft stop, for the
// haproxy container's preStop hook. The kubelet runs a container's preStop
// and only then sends SIGTERM to its main process, HAProxy's master, which
// is a hard stop (every connection cut). This sends the master SIGUSR1
// instead (haproxy.SoftStop: the listeners close, so another HAProxy bound
// to the same ports with SO_REUSEPORT, the pod that replaces this one on
// the node, gets every new connection; the established ones finish, within
// hard-stop-after when it is set) and returns when the master has exited,
// so the SIGTERM finds nothing left. In the container, where the master is
// PID 1, the hook's own process ends with it (the kubelet records the hook
// as failed, with the container already stopped). No HAProxy answering is
// nothing to stop (exit 0). With --wait it sends nothing and only waits.
func RunStop(args []string, stderr io.Writer) int {
	c, err := ParseStop(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy stop: %v\n", err)
		return 2
	}
	ctx := context.Background()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	if err := stop(ctx, c, stderr); err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy stop: %v\n", err)
		return 1
	}
	return 0
}

func stop(ctx context.Context, c StopConfig, stderr io.Writer) error {
	if !c.Wait {
		master, err := haproxy.SoftStop(ctx, c.Dir)
		switch {
		case haproxy.NotRunning(err):
			fmt.Fprintf(stderr, "zerodrop haproxy stop: no HAProxy answers in %s: nothing to stop\n", c.Dir)
			return nil
		case err != nil:
			return err
		}
		fmt.Fprintf(stderr, "zerodrop haproxy stop: HAProxy master %d stops softly (SIGUSR1); waiting for it to exit\n", master)
	}
	if c.Wait && !markedWithin(ctx, c.Dir, c.MarkTimeout) {
		fmt.Fprintf(stderr, "zerodrop haproxy stop: HAProxy in %s was not told to stop within %s: not waiting for it\n", c.Dir, c.MarkTimeout)
		return nil
	}
	if err := haproxy.WaitStopped(ctx, c.Dir); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "zerodrop haproxy stop: no HAProxy answers in %s\n", c.Dir)
	return nil
}

// markedWithin reports whether dir is marked stopping, waiting up to d for
// the mark: at a pod's deletion the kubelet runs every container's preStop
// hook at once, and the haproxy container's marks the directory first
// thing; at a restart of the controller container alone nothing does.
func markedWithin(ctx context.Context, dir string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !haproxy.Stopping(dir) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}
