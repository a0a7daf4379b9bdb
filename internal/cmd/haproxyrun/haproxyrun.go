// Package haproxyrun is the `zerodrop haproxy` command: the HAProxy
// container of a data-plane replica. It prepares the state directory the
// replica's zerodrop process attaches to (the first configuration, once)
// and then replaces itself with HAProxy's master, in the foreground, so the
// container's main process is HAProxy itself: zerodrop's process may stop
// and start again without touching it, and when it is gone the kubelet
// restarts the container, which serves the configuration and server-state
// file zerodrop last wrote.
package haproxyrun

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// DefaultDir is the state directory in the pod (an emptyDir both
// containers mount).
const DefaultDir = "/run/zerodrop/haproxy"

// Config is the command's flags.
type Config struct {
	Dir, Binary string
}

// Parse parses the command's arguments as Run does, without running
// anything (the install's tests run the chart's container with it).
func Parse(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("zerodrop haproxy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Dir, "dir", DefaultDir, "state directory shared with the data-plane replica's zerodrop process (--haproxy-socket DIR/admin.sock --haproxy-master-socket DIR/master.sock --haproxy-config DIR/haproxy.cfg)")
	fs.StringVar(&c.Binary, "binary", "haproxy", "HAProxy executable")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return c, nil
}

// Run parses args, prepares the directory and executes HAProxy; it returns
// only on failure.
func Run(args []string, stderr io.Writer) int {
	c, err := Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy: %v\n", err)
		return 2
	}
	if err := exe(c.Dir, c.Binary); err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy: %v\n", err)
		return 1
	}
	return 0
}

func exe(dir, binary string) error {
	path, args, err := Prepare(dir, binary)
	if err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{binary}, args...), os.Environ())
}

// Prepare makes dir HAProxy's state directory (haproxy.PrepareContainer)
// and returns the executable and the arguments the command runs HAProxy
// with (haproxy.ContainerArgs).
func Prepare(dir, binary string) (path string, args []string, err error) {
	if err := haproxy.PrepareContainer(haproxy.Options{Dir: dir}); err != nil {
		return "", nil, err
	}
	if path, err = exec.LookPath(binary); err != nil {
		return "", nil, err
	}
	args, err = haproxy.ContainerArgs(dir)
	return path, args, err
}
