package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// statePort finds which of a replica's candidate ports serves that
// replica's state endpoint. Two data-plane pods on one node (a DaemonSet
// surge, host network) share the node's address: the first binds the state
// port, the second the alternate (Server.AlternateAddr). Which one is which
// is told by the certificate alone: a port counts for a replica only once a
// TLS handshake there, with the configuration that accepts only that
// replica's pod (Discovery.TLS), has verified it. The other pod's
// certificate fails that handshake, so its answers are never read as this
// replica's.
//
// The port found is kept until a read through it fails; the next read
// probes again. A read is never retried here: a failure stays the caller's
// (the gates wait), and a replica found at none of the ports fails its read
// with each port's reason.
type statePort struct {
	host  string
	ports []int
	// probe completes a TLS handshake with the replica's pinned
	// configuration at addr (dialTLS).
	probe func(ctx context.Context, addr string) error

	mu   sync.Mutex
	port int // 0: not known
}

// base is the state endpoint's URL: the port found, or probed for now.
func (s *statePort) base(ctx context.Context) (string, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.port == 0 {
		// Held while probing: concurrent reads of one replica wait for one
		// probe (bounded by the handshake timeout per port) instead of
		// each making their own.
		var errs []error
		for _, p := range s.ports {
			addr := net.JoinHostPort(s.host, strconv.Itoa(p))
			err := s.probe(ctx, addr)
			if err == nil {
				s.port = p
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		if s.port == 0 {
			return "", 0, fmt.Errorf("state endpoint found at none of its ports: %w", errors.Join(errs...))
		}
	}
	return "https://" + net.JoinHostPort(s.host, strconv.Itoa(s.port)), s.port, nil
}

// forget drops port after a failed read through it: the next read probes
// every port again (the replica's process may have restarted on the other
// one).
func (s *statePort) forget(port int) {
	s.mu.Lock()
	if s.port == port {
		s.port = 0
	}
	s.mu.Unlock()
}

// known is the port found, 0 when none is.
func (s *statePort) known() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// dialTLS is a statePort's probe: a TCP connection and a TLS handshake
// with cfg (which verifies the replica), bounded by timeout, then closed.
// The client's side of the handshake is the one that checks whose
// certificate the port serves.
func dialTLS(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d := &tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
