package haproxy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The admin socket is one of the listeners a new worker takes over at a
// reload (`expose-fd listeners`): until the master has told the old worker to
// stop, both accept on it, so a connection made just after the new worker
// first answered can still reach the old one. Seen beside `stress-ng --cpu 2`:
// 2 of 900 reads made right after a reload loop's new worker answered were
// answered by the old worker. Such a reading describes the previous
// configuration, and a write the old worker takes is lost with it. Every
// exchange on the admin socket therefore starts with `show info`, and an
// answer from any process but the current worker is asked again.

// exchange sends commands on one line to the admin socket (runtimeClient.chain)
// and returns the replies of the worker that currently serves, after asking
// again, within the reload timeout, while an old worker answers. A command an
// old worker took is sent again: every command the provider sends is
// idempotent on the worker that did not see it (add, set, del and shutdown of
// one named server). Each time it sends the line it counts the `show info`
// as a read and calls count for the commands (the hooks count what is sent).
func (p *Provider) exchange(ctx context.Context, count func(), commands ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	for {
		p.hooks.OnRead("show-info")
		count()
		reply, err := p.runtimeChain(ctx, append([]string{"show info"}, commands...))
		if err != nil {
			return "", err
		}
		info, rest, ok := strings.Cut(reply, "\n\n")
		if !ok {
			return "", fmt.Errorf("runtime command %q: no reply to show info before it: %q", strings.Join(commands, "; "), firstLine(reply))
		}
		pid, err := infoPid(info)
		if err != nil {
			return "", err
		}
		if p.isCurrentWorker(ctx, pid) {
			return rest, nil
		}
		p.log.V(1).Info("admin socket answered by a worker that no longer serves; asking again", "pid", pid, "worker", p.worker.Load())
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("runtime command %q: answered by worker %d, not by the current worker %d: %w", strings.Join(commands, "; "), pid, p.worker.Load(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// isCurrentWorker reports whether pid is the worker that serves now. The one
// this Provider last saw ready is; another is only when the master lists it
// among its current workers (a reload someone else made: another Provider on
// this HAProxy), and then becomes the one.
func (p *Provider) isCurrentWorker(ctx context.Context, pid int) bool {
	if int64(pid) == p.worker.Load() {
		return true
	}
	info, err := p.procs(ctx)
	if err != nil || !slices.Contains(info.Workers, pid) {
		return false
	}
	p.worker.Store(int64(pid))
	return true
}

// infoPid is the Pid line of a `show info` reply.
func infoPid(info string) (int, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("show info: no Pid in %q", firstLine(info))
}
