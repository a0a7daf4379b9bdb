package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"zerodrop.dev/zerodrop/internal/model"
)

// refuseHeld fails, without a reload, the members with a listener HAProxy
// does not serve yet whose address and port another process on this host
// holds, and returns the others. HAProxy would refuse the reload, but not
// at once: a new process that cannot bind a port pauses the running
// worker's listeners (every Service's: SIGTTOU) and tries again, for up to
// about a second, before it gives up and resumes them — a refused reload
// stops new connections to every frontend for that long, and its retry
// would again. Seen in `procmem -refused 1`: every proxy "Paused", then
// "Resumed", at each refused reload.
//
// A probe that cannot tell (a port below 1024 without CAP_NET_BIND_SERVICE,
// an address not on this host) leaves the member to HAProxy, whose alerts
// name it (failNamed). Listeners HAProxy already serves are never probed:
// their sockets are its own.
func (p *Provider) refuseHeld(ctx context.Context, members []*reloadMember) []*reloadMember {
	snap, err := p.snapshot(ctx)
	if err != nil {
		// The reload reads it again and fails the same way.
		return members
	}
	served := map[string]bool{}
	for _, lb := range snap.all() {
		for _, l := range lb.Listeners {
			served[listenAddr(l)] = true
		}
	}
	rest := members[:0:0]
	for _, m := range members {
		if err := probeListeners(m.target, served); err != nil {
			m.err = fmt.Errorf("haproxy: %s: %w: %w", m.key, err, errRejected)
			continue
		}
		rest = append(rest, m)
	}
	return rest
}

func listenAddr(l model.Listener) string {
	return net.JoinHostPort(l.Address, strconv.Itoa(int(l.Port)))
}

// probeListeners binds each listener of target not in served for a moment,
// as HAProxy would (SO_REUSEADDR; not SO_REUSEPORT, which would join a
// holder's socket group and take its connections), and returns an error
// naming the first whose port is in use.
func probeListeners(target *model.LoadBalancer, served map[string]bool) error {
	if target == nil {
		return nil
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	for _, l := range target.Listeners {
		if l.Protocol != model.TCP || served[listenAddr(l)] {
			continue
		}
		ln, err := lc.Listen(context.Background(), "tcp", listenAddr(l))
		if err == nil {
			_ = ln.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot bind %s (%s): another process on this host holds that port", listenAddr(l), l.Name)
		}
	}
	return nil
}
