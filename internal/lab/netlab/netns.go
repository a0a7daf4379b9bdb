package netlab

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// Netns is a named network namespace (a bind mount under /run/netns, as
// `ip netns add` makes it).
type Netns struct {
	Name string
}

// Do runs fn on an OS thread switched into the namespace. Afterwards the
// thread is switched back and released; if switching back fails, the
// goroutine ends still locked, so the Go runtime throws the thread away
// instead of handing a thread in the wrong namespace to other goroutines.
// Sockets fn creates stay in the namespace for their whole life, whichever
// thread later reads or writes them.
func (n *Netns) Do(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fail := func(err error) { runtime.UnlockOSThread(); done <- err }
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(fmt.Errorf("open this thread's netns: %w", err))
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(filepath.Join("/run/netns", n.Name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(fmt.Errorf("open netns %s: %w", n.Name, err))
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			fail(fmt.Errorf("enter netns %s: %w", n.Name, err))
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: stay locked, the thread dies with this goroutine
		done <- err
	}()
	return <-done
}

// DialContext dials addr from inside the namespace, so a process in the root
// namespace reaches servers that only exist in lab namespaces. addr must be an
// IP address: name resolution would run outside the namespace's thread.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s %s from netns %s: %w", network, addr, n.Name, err)
	}
	return conn, nil
}

// Listen opens a listener inside the namespace; the lab process serves it from
// the root namespace (the socket keeps its namespace).
func (n *Netns) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s %s in netns %s: %w", network, addr, n.Name, err)
	}
	return ln, nil
}

// command is a short command run inside the namespace through
// `ip netns exec` (which also gives it a /sys of that namespace); the lab's
// Start runs and stops the long-lived ones.
func (n *Netns) command(name string, args ...string) supervisor.Command {
	return supervisor.Command{Name: "ip", Args: append([]string{"netns", "exec", n.Name, name}, args...)}
}

// Run runs a short command inside the namespace and returns its error with
// its output.
func (n *Netns) Run(ctx context.Context, name string, args ...string) error {
	if err := supervisor.Run(ctx, n.command(name, args...)); err != nil {
		return fmt.Errorf("netns %s: %w", n.Name, err)
	}
	return nil
}

// SetSysctl writes a sysctl inside the namespace (net.* sysctls are per
// namespace, so the root namespace keeps its own value).
func (n *Netns) SetSysctl(ctx context.Context, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	return n.Run(ctx, "sh", "-c", fmt.Sprintf("echo %s > %s", value, path))
}

// ip runs the ip command (in the root namespace; pass -n NS to act on one).
func ip(ctx context.Context, args ...string) error {
	return supervisor.Run(ctx, supervisor.Command{Name: "ip", Args: args})
}
