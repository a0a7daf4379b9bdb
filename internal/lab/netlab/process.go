package netlab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a process the lab started inside a namespace.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

// stopGrace is how long a process has after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// Start runs name with args inside ns. The process is in its own process
// group, so Stop (and Lab.Close) also ends whatever it forked. stdout and
// stderr may be nil.
func (l *Lab) Start(ns *Netns, stdout, stderr io.Writer, name string, args ...string) (*Process, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// No Pdeathsig: it fires when the forking OS thread ends, and Netns.Do
	// may end that thread long before the lab does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	// Registered before the start: Close stops whatever did start.
	if err := l.onClose(fmt.Sprintf("process %s in %s", name, ns.Name), p.Stop); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		close(p.done)
		return nil, fmt.Errorf("start %s in netns %s: %w", name, ns.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group, SIGKILL after a grace period, and
// waits for the exit. Idempotent; the exit status of a stopped process is not
// an error.
func (p *Process) Stop() error {
	p.once.Do(func() {
		if p.Cmd.Process == nil {
			return
		}
		pgid := -p.Cmd.Process.Pid
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(pgid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(stopGrace):
				_ = syscall.Kill(pgid, syscall.SIGKILL)
				<-p.done
			}
		}
		// Children that outlived the leader (the group may still exist).
		_ = syscall.Kill(pgid, syscall.SIGKILL)
	})
	return nil
}

// Signal sends sig to the process group (a pod's SIGTERM, with the caller
// keeping the grace period); a process that has exited is left alone.
func (p *Process) Signal(sig syscall.Signal) {
	if p.Cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
	}
}

// ExitCode is the process's exit code once Done is closed: 128+signal for a
// process ended by a signal, as a container runtime reports it.
func (p *Process) ExitCode() int32 {
	<-p.done
	st := p.Cmd.ProcessState
	if st == nil {
		return 137
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(st.ExitCode())
}

// CloseOnSignal closes the lab on SIGINT or SIGTERM and then lets the signal
// take its default course (the process exits as it would have). The returned
// stop undoes the hook; call it after a normal Close.
func (l *Lab) CloseOnSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case sig := <-ch:
			if err := l.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "netlab: teardown on %v: %v\n", sig, err)
			}
			signal.Stop(ch)
			signal.Reset(sig)
			if s, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), s)
			}
		case <-quit:
		}
	}()
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
		})
	}
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
func (l *Lab) Forward(ns *Netns, listenAddr, target string) (net.Addr, func(), error) {
	ln, err := ns.Listen("tcp", listenAddr)
	if err != nil {
		return nil, nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	if err := l.onClose("forwarder "+ln.Addr().String()+" in "+ns.Name, func() error { stop(); return nil }); err != nil {
		ln.Close()
		return nil, nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := net.DialTimeout("tcp", target, 10*time.Second)
				if err != nil {
					in.Close()
					return
				}
				track(in, true)
				track(out, true)
				defer func() { track(in, false); track(out, false) }()
				pipe(in, out)
			}()
		}
	}()
	return ln.Addr(), stop, nil
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
	out, err := exec.Command("ip", args...).CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}
