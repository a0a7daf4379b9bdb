package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

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
// their sockets are its own. It returns its reading of the runtime too
// (nil when the read failed), for the reload that follows.
func (p *Provider) refuseHeld(ctx context.Context, members []*reloadMember) ([]*reloadMember, *snapshot) {
	snap, err := p.snapshot(ctx)
	if err != nil {
		// The reload reads it again and fails the same way.
		return members, nil
	}
	served := map[string]bool{}
	for _, lb := range snap.unversioned() {
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
	return rest, snap
}

func listenAddr(l model.Listener) string {
	return net.JoinHostPort(l.Address, strconv.Itoa(int(l.Port)))
}

// probeListeners binds each listener of target not in served for a moment,
// as HAProxy binds (SO_REUSEADDR and SO_REUSEPORT, as root like HAProxy's
// master), and returns an error naming the first whose port is in use. The
// socket is bound, never listening: it takes no connection from a socket
// it shares the port with (another HAProxy on this host, as two data-plane
// replicas of one node during an update), and its bind fails exactly where
// HAProxy's would — against a listener without SO_REUSEPORT or another
// user's.
func probeListeners(target *model.LoadBalancer, served map[string]bool) error {
	if target == nil {
		return nil
	}
	for _, l := range target.Listeners {
		if l.Protocol != model.TCP || served[listenAddr(l)] {
			continue
		}
		if err := bindOnly(l.Address, int(l.Port)); errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot bind %s (%s): another process on this host holds that port", listenAddr(l), l.Name)
		}
	}
	return nil
}

// bindOnly binds a TCP socket to addr:port and closes it.
func bindOnly(addr string, port int) error {
	ip := net.ParseIP(addr)
	if ip == nil {
		return fmt.Errorf("not an IP address: %q", addr)
	}
	family, sa := syscall.AF_INET6, syscall.Sockaddr(nil)
	if ip4 := ip.To4(); ip4 != nil {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: port, Addr: [4]byte(ip4)}
	} else {
		sa = &syscall.SockaddrInet6{Port: port, Addr: [16]byte(ip.To16())}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	for _, opt := range []int{syscall.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, opt, 1); err != nil {
			return err
		}
	}
	return syscall.Bind(fd, sa)
}
