package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/connguard"
)

// handshakeListener completes each connection's TLS handshake itself,
// bounded by the handshake timeout, before http.Server sees it: a
// connection is trusted (connguard.Trust) only once the handshake has
// verified the control role's client certificate, so that connections
// that never authenticate — idle, or handshaking a byte at a time — stay
// pending, where the guard bounds them and closes the oldest first.
// Handshakes run one goroutine each, so a slow one never delays another.
type handshakeListener struct {
	guard   *connguard.Listener
	cfg     *tls.Config
	timeout time.Duration
	// maxTrusted bounds the authenticated connections served at once;
	// trusted counts them (decremented by connState when http.Server is
	// done with one).
	maxTrusted int64
	trusted    atomic.Int64
	log        logr.Logger

	ready chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error
}

func newHandshakeListener(guard *connguard.Listener, cfg *tls.Config, timeout time.Duration, maxTrusted int, log logr.Logger) *handshakeListener {
	h := &handshakeListener{guard: guard, cfg: cfg, timeout: timeout, maxTrusted: int64(maxTrusted), log: log,
		ready: make(chan net.Conn), done: make(chan struct{})}
	go h.acceptLoop()
	return h
}

func (h *handshakeListener) acceptLoop() {
	for {
		c, err := h.guard.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				h.stop(err)
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: the guard keeps
				// the held connections few; retry shortly.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			h.stop(err)
			return
		}
		go h.handshake(c)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// handshake completes c's TLS handshake and hands the connection to Accept
// if it authenticated; otherwise it closes it.
func (h *handshakeListener) handshake(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	tc := tls.Server(c, h.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		// A caller without the control role's certificate, or a flood's
		// connection evicted or timed out: the endpoint working.
		h.log.V(1).Info("state endpoint: handshake failed", "remote", c.RemoteAddr().String(), "err", err.Error())
		_ = c.Close()
		return
	}
	if len(tc.ConnectionState().PeerCertificates) == 0 || !connguard.Trust(tc) {
		// No verified peer (a configuration that does not require one
		// trusts nobody), or closed by the guard meanwhile.
		_ = tc.Close()
		return
	}
	if h.trusted.Add(1) > h.maxTrusted {
		h.trusted.Add(-1)
		h.log.Info("state endpoint: too many authenticated connections; closing the newest", "max", h.maxTrusted,
			"remote", c.RemoteAddr().String())
		_ = tc.Close()
		return
	}
	select {
	case h.ready <- tc:
	case <-h.done:
		h.trusted.Add(-1)
		_ = tc.Close()
	}
}

// connState is the http.Server's ConnState hook: a connection it has
// finished with frees its place among the authenticated ones.
func (h *handshakeListener) connState(_ net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		h.trusted.Add(-1)
	}
}

func (h *handshakeListener) stop(err error) {
	h.once.Do(func() {
		h.err = err
		close(h.done)
	})
}

// Accept returns the next authenticated connection (a *tls.Conn).
func (h *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-h.ready:
		return c, nil
	case <-h.done:
		return nil, h.err
	}
}

func (h *handshakeListener) Close() error {
	err := h.guard.Close()
	h.stop(net.ErrClosed)
	return err
}

func (h *handshakeListener) Addr() net.Addr { return h.guard.Addr() }
