package dataplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
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
		// probe instead of each making their own. The ports are probed at
		// once, so an unreachable replica costs one handshake bound, not
		// one per port: its read fails as early as with a single port.
		errs := make([]error, len(s.ports))
		var wg sync.WaitGroup
		for i, p := range s.ports {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr := net.JoinHostPort(s.host, strconv.Itoa(p))
				if err := s.probe(ctx, addr); err != nil {
					errs[i] = fmt.Errorf("%s: %w", addr, err)
				}
			}()
		}
		wg.Wait()
		for i, p := range s.ports {
			// One process binds one port: at most one verifies.
			if errs[i] == nil {
				s.port = p
				break
			}
		}
		if s.port == 0 {
			return "", 0, &notFoundError{errs: errs}
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
			return fmt.Errorf("connect and TLS handshake (bound %s): %w", timeout, err)
		}
		return c.Close()
	}
}

// notFoundError is a replica found at none of its state ports: each
// port's reason, on one line.
type notFoundError struct{ errs []error }

func (e *notFoundError) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return "state endpoint found at none of its ports: " + strings.Join(msgs, "; ")
}

func (e *notFoundError) Unwrap() []error { return e.errs }
