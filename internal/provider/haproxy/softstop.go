package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// stoppingFile, in the state directory, marks an HAProxy that was told to
// stop softly (SoftStop). A reload would undo the soft stop: the master,
// still waiting for its draining worker, forks a new one from the whole
// configuration, which binds every listener again and serves new
// connections (HAProxy 2.6.12: `reload` on the master CLI after SIGUSR1).
// Today reload also fails earlier, when it saves the servers' state through
// the admin socket, which the draining worker has closed with its other
// listeners; the mark does not depend on that. So reload refuses while the
// file exists, and the container's start removes it (ClearStopping).
const stoppingFile = "stopping"

// ErrStopping is a reload refused because the HAProxy stops softly.
var ErrStopping = errors.New("haproxy: stopping softly (a reload would bind the listeners again)")

// pollInterval is how often SoftStop's and WaitStopped's waits look again.
const pollInterval = 100 * time.Millisecond

// goneAnswers is how many answers in a row, pollInterval apart, say that no
// master runs before SoftStop and WaitStopped believe it (see WaitStopped):
// a master re-executing itself refuses for a moment.
const goneAnswers = 3

// SoftStop stops the HAProxy of the state directory dir softly: it marks the
// directory stopping (no reload from now on), reads the master's PID from
// its master CLI (`show proc`, so the PID is the one of the caller's PID
// namespace when the caller shares HAProxy's: PID 1 in its container, the
// host's in the lab) and sends the master SIGUSR1. The master passes it on
// to its workers, which close their listeners at once (another HAProxy
// bound with SO_REUSEPORT to the same address and port gets every new
// connection), finish the connections they hold (at most hard-stop-after,
// when the configuration sets it) and exit; the master exits after its last
// worker. It returns the master's PID once the signal is sent.
func SoftStop(ctx context.Context, dir string) (int, error) {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(ps.dir, stoppingFile), nil, 0o600); err != nil {
		return 0, fmt.Errorf("haproxy: mark %s stopping: %w", ps.dir, err)
	}
	reply, err := runtimeClient{path: ps.master}.do(ctx, "show proc")
	// Asked again while no master answers, up to goneAnswers times, as
	// WaitStopped does: a master re-executing itself refuses for a moment.
	for n := 1; NotRunning(err) && n < goneAnswers; n++ {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("haproxy: soft stop: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
		reply, err = runtimeClient{path: ps.master}.do(ctx, "show proc")
	}
	if err != nil {
		return 0, fmt.Errorf("haproxy: soft stop: %w", err)
	}
	info, err := parseProc(reply)
	if err != nil {
		return 0, fmt.Errorf("haproxy: soft stop: %w", err)
	}
	if err := syscall.Kill(info.Master, syscall.SIGUSR1); err != nil {
		return 0, fmt.Errorf("haproxy: soft stop: signal master %d: %w", info.Master, err)
	}
	return info.Master, nil
}

// WaitStopped waits until no HAProxy answers on dir's master socket (its
// master has exited, or never ran), or until ctx ends. It needs no PID, so
// it works from another container of the pod, which shares the state
// directory but not the PID namespace. The master is gone when the socket
// refuses or is missing, when the connection is reset unanswered (NotRunning), or
// when what answers there is not a master's
// `show proc` (a proxy in front of the socket, as the lab's counting one,
// whose HAProxy is gone). It takes goneAnswers such answers in a row,
// pollInterval apart: HAProxy 2.6's master re-executes itself right after
// it starts (into its wait mode, as at a reload), and a client polling from
// the socket's creation saw, within 0.1 s: no such file, a connection
// reset, refused for 30 ms, then answers (4 runs, an idle machine). One such
// answer made make test's TestStop of internal/cmd/haproxyrun return at
// once with the master running. A directory marked stopping is not
// reloaded.
func WaitStopped(ctx context.Context, dir string) error {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return err
	}
	gone := 0
	for {
		reply, err := runtimeClient{path: ps.master}.do(ctx, "show proc")
		switch {
		case NotRunning(err):
			gone++
		case err == nil:
			if _, perr := parseProc(reply); perr != nil {
				gone++
			} else {
				gone = 0
			}
		default:
			gone = 0
		}
		if gone == goneAnswers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy: %s still answers: %w", ps.master, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// NotRunning reports whether err, a master CLI command's, says no HAProxy
// listens there: the socket refuses or is missing, or the connection was
// closed without the command being read (ECONNRESET on the read, EPIPE on
// the write): what a socket whose listener is closing, or a proxy in front
// of one that answers at once, does. A timeout is not gone: a listener that
// accepts but does not answer yet may be a busy master.
func NotRunning(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ENOENT, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ClearStopping removes dir's stopping mark: a container that starts
// HAProxy again (in the same pod, whose state directory outlives the
// container) starts one that may be reloaded.
func ClearStopping(dir string) error {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(ps.dir, stoppingFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("haproxy: clear stopping mark: %w", err)
	}
	return nil
}

// Stopping reports whether dir is marked stopping (SoftStop was called on
// it since its HAProxy started).
func Stopping(dir string) bool {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(ps.dir, stoppingFile))
	return err == nil
}

// stopping reports whether the state directory is marked stopping.
func (p *Provider) stopping() bool {
	_, err := os.Stat(filepath.Join(p.paths.dir, stoppingFile))
	return err == nil
}

// runtimeChain sends commands to the current worker: on the admin socket,
// or, once the HAProxy stops softly, through the master CLI (`@1`, the
// current worker, before each command): the draining worker has closed
// the admin socket with its other listeners, yet it still holds
// connections, so its backends are read and drained there until it exits.
func (p *Provider) runtimeChain(ctx context.Context, commands []string) (string, error) {
	var reply strings.Builder
	err := p.runtimeStream(ctx, commands, func(r io.Reader) error {
		if _, err := io.Copy(&reply, r); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return nil
	})
	return reply.String(), err
}

// runtimeStream is runtimeChain with the replies handed to consume as they
// arrive (runtimeClient.stream).
func (p *Provider) runtimeStream(ctx context.Context, commands []string, consume func(io.Reader) error) error {
	if !p.stopping() {
		return p.admin.stream(ctx, consume, commands...)
	}
	prefixed := make([]string, len(commands))
	for i, c := range commands {
		prefixed[i] = "@1 " + c
	}
	return p.master.stream(ctx, consume, prefixed...)
}
