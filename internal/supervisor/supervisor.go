// Package supervisor is the project's one way to start and stop a process
// (the lab's namespaced processes and container processes, its
// kube-controller-manager and controller processes, hack/procmem's
// controller and HAProxy), to run a command to its end (ip, helm, go build,
// `zerodrop check`'s helm template, the control plane's build scripts), and
// to find processes by their command line (HAProxies a test or a lab run
// left behind).
//
// A started process is the leader of a process group of its own, so that a
// terminal's Ctrl-C reaches only the parent, which stops its children in
// order, and so that stopping it also ends whatever it forked: Stop sends
// SIGTERM to the group, SIGKILL after a bound, waits for the exit (reaping
// the child) and kills what is left of the group.
//
// The HAProxy provider's start of the HAProxy master is not here: it is
// production code whose HAProxy outlives the controller on purpose (its own
// session, no parent-death signal, stopped through its PID file by whoever
// owns the directory next), which is none of what this package is for.
// cmd/zerodrop's TestOneOfEachMechanism keeps this package the only one
// that starts processes, but for such listed exceptions.
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long a process has after SIGTERM before SIGKILL when
// its Spec gives no Grace.
const DefaultGrace = 10 * time.Second

// Spec says what to start and how.
type Spec struct {
	Name string
	Args []string
	// Env is the process's environment; nil inherits this process's.
	Env []string
	// Dir is the working directory; "" is this process's.
	Dir string
	// Log, when set, is a file created for the process's stdout and
	// stderr; otherwise they go to Stdout and Stderr (nil discards).
	Log            string
	Stdout, Stderr io.Writer
	// Grace bounds the wait between SIGTERM and SIGKILL in Stop.
	Grace time.Duration
	// DieWithParent makes the kernel SIGKILL the process when this one
	// dies. Not for a process started from a thread that may end before
	// this process does (a network namespace's locked thread): the signal
	// follows the forking thread, not the process.
	DieWithParent bool
}

// Process is a started process, the leader of its own process group.
type Process struct {
	cmd   *exec.Cmd
	grace time.Duration
	log   *os.File
	done  chan struct{}
	err   error
	once  sync.Once
}

// Start starts the process described by s and reaps it when it exits.
func Start(s Spec) (*Process, error) {
	cmd := exec.Command(s.Name, s.Args...)
	cmd.Env, cmd.Dir = s.Env, s.Dir
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	p := &Process{cmd: cmd, grace: s.Grace, done: make(chan struct{})}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	if s.Log != "" {
		f, err := os.Create(s.Log)
		if err != nil {
			return nil, fmt.Errorf("start %s: log: %w", s.Name, err)
		}
		p.log = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		if p.log != nil {
			p.log.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's PID, also its process group's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the exit and returns its error (nil for exit status 0).
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// State is the exit's state once Done is closed, nil before.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Signal sends sig to the process group; a process that has exited is left
// alone (its PID may be another's by now, its group is not).
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = syscall.Kill(-p.Pid(), sig)
	}
}

// SignalLeader sends sig to the process only, as a container runtime
// signals a container's first process.
func (p *Process) SignalLeader(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill SIGKILLs the process group at once: no handler runs, nothing is
// released.
func (p *Process) Kill() { p.Signal(syscall.SIGKILL) }

// Stop sends SIGTERM to the process group, SIGKILL after the Spec's Grace,
// waits for the exit, and kills whatever of the group outlived its leader.
// Idempotent; the exit status of a stopped process is not an error.
func (p *Process) Stop() error {
	p.once.Do(func() {
		if !p.Exited() {
			_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(p.grace):
				_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
				<-p.done
			}
		}
		// Children that outlived the leader (the group may still exist).
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	})
	return nil
}

// ExitCode waits for the exit and returns its code: 128+signal for a
// process ended by a signal, as a container runtime reports it.
func (p *Process) ExitCode() int32 {
	<-p.done
	st := p.cmd.ProcessState
	if st == nil {
		return 137
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(st.ExitCode())
}

// ExitError reports whether err is a command's non-zero exit (and not a
// failure to start it).
func ExitError(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}
