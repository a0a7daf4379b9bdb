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

// Run parses args, prepares the directory and executes HAProxy; it returns
// only on failure.
func Run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("zerodrop haproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", DefaultDir, "state directory shared with the data-plane replica's zerodrop process (--haproxy-socket DIR/admin.sock --haproxy-master-socket DIR/master.sock --haproxy-config DIR/haproxy.cfg)")
	binary := fs.String("binary", "haproxy", "HAProxy executable")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop haproxy: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if err := exe(*dir, *binary); err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy: %v\n", err)
		return 1
	}
	return 0
}

func exe(dir, binary string) error {
	if err := haproxy.PrepareContainer(haproxy.Options{Dir: dir}); err != nil {
		return err
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return err
	}
	args, err := haproxy.ContainerArgs(dir)
	if err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{binary}, args...), os.Environ())
}
