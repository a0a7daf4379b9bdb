package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
)

// Server limits. The endpoint has one legitimate client, the control role
// (a few replicas, a few connections each), and answers in milliseconds:
// anything slower or more numerous is refused or cut rather than held.
const (
	// DefaultMaxConnections bounds the connections served at once (the rest
	// wait in the kernel's accept queue).
	DefaultMaxConnections = 64
	// DefaultReadTimeout covers the TLS handshake and the request.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout covers reading HAProxy's state and the answer.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection left unused.
	DefaultIdleTimeout = 60 * time.Second
)

// Server serves a data-plane replica's state endpoint over TLS (TLS, from
// stateauth.Replica: the replica's certificate, the control role's client
// certificate required) in every process of the role (no leader election).
type Server struct {
	Addr    string
	Handler http.Handler
	TLS     *tls.Config
	// MaxConnections, ReadTimeout, WriteTimeout, IdleTimeout: zero gets the
	// defaults above.
	MaxConnections int
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	Log            logr.Logger

	// Bound, when set, receives the listening address once bound.
	Bound func(net.Addr)
}

func (s *Server) NeedLeaderElection() bool { return false }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Start binds the address at once — while the replica runs nothing else
// can take the port — and serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if s.TLS == nil {
		return errors.New("state endpoint: no TLS configuration (it is never served in the clear)")
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("state endpoint: %w", err)
	}
	maxConns := s.MaxConnections
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections
	}
	read := orDefault(s.ReadTimeout, DefaultReadTimeout)
	srv := &http.Server{
		Handler:           s.Handler,
		TLSConfig:         s.TLS,
		ReadHeaderTimeout: read,
		ReadTimeout:       read,
		WriteTimeout:      orDefault(s.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       orDefault(s.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    8 << 10,
		// Refused handshakes (a caller without the control role's
		// certificate) are the endpoint working, not errors to print.
		ErrorLog: log.New(logWriter{s.Log.V(1)}, "", 0),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if s.Bound != nil {
		s.Bound(ln.Addr())
	}
	s.Log.Info("serving the data-plane state endpoint (TLS, control role's client certificate required)", "address", ln.Addr().String())
	if err := srv.ServeTLS(netutil.LimitListener(ln, maxConns), "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("state endpoint: %w", err)
	}
	return nil
}

// logWriter sends net/http's server log lines to a logr logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
