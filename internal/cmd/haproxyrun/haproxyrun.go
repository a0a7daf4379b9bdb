// Package haproxyrun is the `zerodrop haproxy` command: the HAProxy
// container of a data-plane replica. It prepares the state directory the
// replica's zerodrop process attaches to (the first configuration, once)
// and then replaces itself with HAProxy's master, in the foreground, so the
// container's main process is HAProxy itself: zerodrop's process may stop
// and start again without touching it, and when it is gone the kubelet
// restarts the container, which serves the configuration and server-state
// file zerodrop last wrote. Before it becomes HAProxy it starts the
// validator beside it (ValidatorCommand), which checks each configuration
// for the replica in this container's memory.
//
// Started as root (to bind the Services' ports below 1024), it runs
// HAProxy's workers, which hold the Internet-facing connections, as the
// unprivileged --worker-user; only the master stays root.
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
	// WorkerUser is --worker-user, UID:GID (empty: the workers keep the
	// user HAProxy starts as).
	WorkerUser string
}

// Parse parses the command's arguments as Run does, without running
// anything (the install's tests run the chart's container with it).
func Parse(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("zerodrop haproxy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { usage(fs, out) }
	fs.StringVar(&c.Dir, "dir", DefaultDir, "state directory shared with the data-plane replica's zerodrop process (--haproxy-socket DIR/admin.sock --haproxy-master-socket DIR/master.sock --haproxy-config DIR/haproxy.cfg --haproxy-validate-socket DIR/"+haproxy.ValidationSocketName+")")
	fs.StringVar(&c.Binary, "binary", "haproxy", "HAProxy executable")
	fs.StringVar(&c.WorkerUser, "worker-user", haproxy.DefaultWorkerUser, "UID:GID HAProxy's workers run as when it starts as root (its master stays root to bind the listeners and reload; it needs CAP_SETUID, CAP_SETGID and CAP_KILL); empty: the workers keep the user HAProxy starts as. Ignored when not started as root: the workers are not root then")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if _, err := haproxy.ParseWorkerUser(c.WorkerUser); err != nil {
		return c, fmt.Errorf("--worker-user: %w", err)
	}
	return c, nil
}

// usage prints the command's forms: the reference (docs/flags.md)
// is `zerodrop haproxy -h`.
func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprintf(out, "usage: zerodrop haproxy [flags]: prepare the state directory, then run HAProxy's master in its place\n")
	fs.PrintDefaults()
	fmt.Fprintf(out, "\nusage: zerodrop haproxy %s [flags]: started by the command above before it becomes HAProxy's master, on a socket it passes (DIR/%s): runs `haproxy -c` on each configuration the replica's zerodrop process names (--haproxy-validate-socket), so that the check's memory is this container's\n", ValidatorCommand, haproxy.ValidationSocketName)
	var vc ValidatorConfig
	validatorFlags(&vc, out).PrintDefaults()
	fmt.Fprintf(out, "\nusage: zerodrop haproxy %s [flags]: stop that HAProxy softly (SIGUSR1 to its master: listeners closed, connections finished) and wait until its master has exited; a preStop hook\n", StopCommand)
	var sc StopConfig
	stopFlags(&sc, out).PrintDefaults()
}

// Run parses args, prepares the directory, starts the validator and
// executes HAProxy; it returns only on failure. `zerodrop haproxy stop …`
// is RunStop, `zerodrop haproxy validator …` RunValidator.
func Run(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == StopCommand {
		return RunStop(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == ValidatorCommand {
		return RunValidator(args[1:], stderr)
	}
	c, err := Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy: %v\n", err)
		return 2
	}
	if err := exe(c, stderr); err != nil {
		fmt.Fprintf(stderr, "zerodrop haproxy: %v\n", err)
		return 1
	}
	return 0
}

func exe(c Config, stderr io.Writer) error {
	path, args, err := Prepare(c, stderr)
	if err != nil {
		return err
	}
	if err := startValidator(c, path, stderr); err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{c.Binary}, args...), os.Environ())
}

// Prepare makes c.Dir HAProxy's state directory (haproxy.PrepareContainer)
// with the workers' user (haproxy.PrepareWorkerUser) and returns the
// executable and the arguments the command runs HAProxy with
// (haproxy.ContainerArgs). Not started as root, the process has no user to
// drop: the worker user is not applied, with a line on stderr saying so.
// As root without the capabilities the master needs to apply it, it fails
// here, naming them, rather than in a crash loop of HAProxy's workers.
func Prepare(c Config, stderr io.Writer) (path string, args []string, err error) {
	user, err := haproxy.ParseWorkerUser(c.WorkerUser)
	if err != nil {
		return "", nil, fmt.Errorf("--worker-user: %w", err)
	}
	if user != nil && os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "zerodrop haproxy: started as uid %d, not root: HAProxy's workers run as that user (--worker-user %s not applied)\n", os.Geteuid(), user)
		user = nil
	}
	if user != nil {
		if err := checkCapabilities(user); err != nil {
			return "", nil, err
		}
	}
	if err := haproxy.PrepareContainer(haproxy.Options{Dir: c.Dir}); err != nil {
		return "", nil, err
	}
	if err := haproxy.PrepareWorkerUser(c.Dir, user); err != nil {
		return "", nil, err
	}
	// A soft stop's mark from this pod's previous container: the HAProxy
	// started now may be reloaded.
	if err := haproxy.ClearStopping(c.Dir); err != nil {
		return "", nil, err
	}
	if path, err = exec.LookPath(c.Binary); err != nil {
		return "", nil, err
	}
	args, err = haproxy.ContainerArgs(c.Dir, user)
	return path, args, err
}
