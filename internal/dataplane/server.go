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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"zerodrop.dev/zerodrop/internal/connguard"
)

// Server limits. The endpoint has one legitimate client, the control role
// (a few replicas, a few connections each), which completes its TLS
// handshake within milliseconds, while anyone in the pod range can reach
// the node address (issue 46, High 1): connections are held only as long
// as needed, and connections not yet authenticated are bounded so that a
// flood closes its own oldest connections, never the control role's new
// ones (connguard).
const (
	// DefaultMaxConnections bounds the authenticated (handshaked)
	// connections served at once: the control role's few replicas keep at
	// most a few each (Discovery's clients keep 4 idle per replica).
	DefaultMaxConnections = 64
	// DefaultHandshakeTimeout bounds the TLS handshake: the control role's
	// takes milliseconds on loopback-like pod networks; 2 s leaves room for
	// a loaded node while keeping each held connection short-lived.
	DefaultHandshakeTimeout = 2 * time.Second
	// DefaultPendingPerSource bounds one address's connections still in
	// their handshake: a control replica opens at most a few at once; 16
	// lets it reconnect freely while a flooding pod only churns its own.
	DefaultPendingPerSource = 16
	// DefaultPending bounds all sources' connections still in their
	// handshake. Each costs a goroutine, a connection and TLS buffers (tens
	// of KiB), so 256 stay within a few MiB, far under the container's
	// memory limit, while 16 flooding addresses are needed to reach it —
	// and even then the oldest go first, never the newest.
	DefaultPending = 256
	// DefaultReadTimeout covers the request once the handshake is done.
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
	Addr string
	// AlternateAddr, when set, is bound instead when Addr is in use: a
	// second data-plane pod on the node (a DaemonSet surge; host network,
	// so one address) serves there, and the control role tells the two
	// apart by their certificates (Discovery.AlternatePorts).
	AlternateAddr string
	Handler       http.Handler
	TLS           *tls.Config
	// MaxConnections (authenticated connections), Handshake,
	// PendingPerSource, Pending (connections in their handshake),
	// ReadTimeout, WriteTimeout, IdleTimeout: zero gets the defaults above.
	MaxConnections   int
	Handshake        time.Duration
	PendingPerSource int
	Pending          int
	ReadTimeout      time.Duration
	WriteTimeout     time.Duration
	IdleTimeout      time.Duration
	Log              logr.Logger

	// Bound, when set, receives the listening address once bound.
	Bound func(net.Addr)
	// Registerer, when set, gets the listener's guard collector
	// (zerodrop_connguard_closed_total{listener="state"}).
	Registerer prometheus.Registerer

	guard atomic.Pointer[connguard.Listener]
}

// Guard is the connection guard once Start has bound the address (nil
// before): its Stats and Collector say what it closed.
func (s *Server) Guard() *connguard.Listener { return s.guard.Load() }

func orDefaultInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
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
	ln, err := s.listen()
	if err != nil {
		return fmt.Errorf("state endpoint: %w", err)
	}
	guard := connguard.New(ln, connguard.Limits{Pending: orDefaultInt(s.Pending, DefaultPending),
		PendingPerSource: orDefaultInt(s.PendingPerSource, DefaultPendingPerSource),
		Handshake:        orDefault(s.Handshake, DefaultHandshakeTimeout)})
	s.guard.Store(guard)
	if s.Registerer != nil {
		if err := s.Registerer.Register(guard.Collector("state")); err != nil {
			s.Log.Error(err, "the state endpoint's connection metric is not exported")
		}
	}
	hl := newHandshakeListener(guard, s.TLS, orDefault(s.Handshake, DefaultHandshakeTimeout),
		orDefaultInt(s.MaxConnections, DefaultMaxConnections), s.Log)
	read := orDefault(s.ReadTimeout, DefaultReadTimeout)
	srv := &http.Server{
		Handler:           s.Handler,
		TLSConfig:         s.TLS,
		ReadHeaderTimeout: read,
		ReadTimeout:       read,
		WriteTimeout:      orDefault(s.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       orDefault(s.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    8 << 10,
		ConnState:         hl.connState,
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
	// hl hands over only handshaked *tls.Conns, which net/http serves as
	// TLS (it recognises the type; the handshake is not repeated).
	if err := srv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("state endpoint: %w", err)
	}
	return nil
}

// listen binds Addr, or AlternateAddr when Addr is in use.
func (s *Server) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.Addr)
	if err == nil || s.AlternateAddr == "" || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	alt, altErr := net.Listen("tcp", s.AlternateAddr)
	if altErr != nil {
		return nil, errors.Join(err, altErr)
	}
	s.Log.Info("the state port is in use (another data-plane pod on this node, during an update?): serving on the alternate; the control role finds this pod there by its certificate",
		"inUse", s.Addr, "address", alt.Addr().String())
	return alt, nil
}

// logWriter sends net/http's server log lines to a logr logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
