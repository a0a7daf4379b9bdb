package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// Process is a process the lab started inside a namespace: the
// supervisor's, in a process group of its own.
type Process = supervisor.Process

// Start runs name with args inside ns. The process is in its own process
// group, so Stop (and Lab.Close) also ends whatever it forked. stdout and
// stderr may be nil.
func (l *Lab) Start(ns *Netns, stdout, stderr io.Writer, name string, args ...string) (*Process, error) {
	// Registered before the start: Close stops whatever did start.
	var p *Process
	if err := l.onClose(fmt.Sprintf("process %s in %s", name, ns.Name), func() error {
		if p == nil {
			return nil
		}
		return p.Stop()
	}); err != nil {
		return nil, err
	}
	// No DieWithParent: the signal fires when the forking OS thread ends,
	// and Netns.Do may end that thread long before the lab does.
	p, err := supervisor.Start(supervisor.Spec{Name: "ip", Args: append([]string{"netns", "exec", ns.Name, name}, args...),
		Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("start %s in netns %s: %w", name, ns.Name, err)
	}
	return p, nil
}

// RemoveStale deletes namespaces left by earlier runs whose process is gone
// (killed with SIGKILL, so Close never ran). Runs of live processes are left
// alone.
func RemoveStale() error {
	entries, err := os.ReadDir("/run/netns")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	for _, e := range entries {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) < 3 || parts[0] != NamePrefix {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil {
			continue
		}
		if syscall.Kill(pid, 0) == nil || pid == os.Getpid() {
			continue
		}
		if err := deleteNetns(e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Forward listens on listenAddr inside ns and copies each connection to
// target, which the lab process dials from the root namespace. It is how a
// process in a lab namespace reaches something that listens on the root
// namespace's loopback (the test control plane). The returned stop closes
// it early (a pod that ends); Lab.Close closes whatever is left.
func (l *Lab) Forward(ns *Netns, listenAddr, target string) (stop func(), err error) {
	ln, err := ns.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	stop = Serve(ln, func(in net.Conn, track func(net.Conn) bool) {
		out, err := net.DialTimeout("tcp", target, 10*time.Second)
		if err == nil && track(out) {
			pipe(in, out)
		}
	})
	if err := l.onClose("forwarder "+ln.Addr().String()+" in "+ns.Name, func() error { stop(); return nil }); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// Serve hands every connection ln accepts to handle, each on a goroutine of
// its own, until the returned stop (idempotent), which closes ln and every
// connection in progress and waits for the handlers (an error of Accept
// other than ln's close is waited out). A handler's
// connection, and those it passes to track, are closed when it returns;
// track is false once stop has begun (the connection is closed then).
func Serve(ln net.Listener, handle func(c net.Conn, track func(net.Conn) bool)) (stop func()) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	stopped := false
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			c.Close()
			return false
		}
		conns[c] = struct{}{}
		return true
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// Out of file descriptors and the like: the client
				// retries; pause rather than spin on the same error.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			wg.Go(func() {
				var mine []net.Conn
				own := func(c net.Conn) bool {
					mine = append(mine, c)
					return track(c)
				}
				defer func() {
					mu.Lock()
					for _, c := range mine {
						delete(conns, c)
						c.Close()
					}
					mu.Unlock()
				}()
				if own(c) {
					handle(c, own)
				}
			})
		}
	})
	return sync.OnceFunc(func() {
		ln.Close()
		mu.Lock()
		stopped = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// runIP runs ip without a context (teardown must run even when the setup's
// context is cancelled).
func runIP(args ...string) (string, error) {
	out, err := supervisor.CombinedOutput(context.Background(), supervisor.Command{Name: "ip", Args: args})
	return string(bytes.TrimSpace(out)), err
}
