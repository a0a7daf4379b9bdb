package haproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
	var reply string
	err := p.exchangeStream(ctx, count, func(r *bufio.Reader) error {
		var b strings.Builder
		if _, err := io.Copy(&b, r); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		reply = b.String()
		return nil
	}, commands...)
	return reply, err
}

// exchangeStream is exchange with the current worker's replies handed to
// consume as they arrive (runtimeClient.stream): `show info`'s answer comes
// first and names the worker, so an old worker's replies are discarded
// unread. consume may be called again, from the start, if the first
// answer was an old worker's.
func (p *Provider) exchangeStream(ctx context.Context, count func(), consume func(*bufio.Reader) error, commands ...string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	for {
		p.hooks.OnRead("show-info")
		count()
		var pid int
		current := false
		err := p.runtimeStream(ctx, append([]string{"show info"}, commands...), func(conn io.Reader) error {
			r := bufio.NewReaderSize(conn, 64<<10)
			info, err := readInfo(r)
			if err != nil {
				return fmt.Errorf("%w before the replies of %q", err, strings.Join(commands, "; "))
			}
			if pid, err = infoPid(info); err != nil {
				return err
			}
			if current = p.isCurrentWorker(ctx, pid); !current {
				return nil
			}
			return consume(r)
		})
		if err != nil || current {
			return err
		}
		p.log.V(1).Info("admin socket answered by a worker that no longer serves; asking again", "pid", pid, "worker", p.worker.Load())
		select {
		case <-ctx.Done():
			return fmt.Errorf("runtime command %q: answered by worker %d, not by the current worker %d: %w", strings.Join(commands, "; "), pid, p.worker.Load(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readInfo reads `show info`'s answer, up to the empty line that ends it.
func readInfo(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if line == "\n" {
			return b.String(), nil
		}
		b.WriteString(line)
		if err != nil {
			return "", fmt.Errorf("no complete reply to show info (%v): %q", err, firstLine(b.String()))
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
