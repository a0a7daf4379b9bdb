// Package probe serves a process' health and readiness checks on a unix
// socket, and is the client an exec probe runs (`zerodrop probe`). A
// host-network pod's TCP probe port is the node's: two pods of one
// DaemonSet on a node (a surge) cannot both bind it, and the kubelet's
// httpGet to the node's address would be answered by whichever holds it —
// the old pod answering for the new one. A socket in the pod's own volume
// is the pod's alone, and an exec probe runs in the container it checks.
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// Paths served, as controller-runtime's probe server serves them (each
// check also at /healthz/NAME, /readyz/NAME; ?verbose lists them).
const (
	LivenessPath  = "/healthz"
	ReadinessPath = "/readyz"
)

// Handler serves liveness and readiness checks the way controller-runtime's
// manager serves them on its TCP probe address.
func Handler(liveness, readiness map[string]healthz.Checker) http.Handler {
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{LivenessPath: liveness, ReadinessPath: readiness} {
		h := &healthz.Handler{Checks: checks}
		mux.Handle(path, http.StripPrefix(path, h))
		mux.Handle(path+"/", http.StripPrefix(path, h))
	}
	return mux
}

// Socket serves Handler on the unix socket Path until its context ends
// (a controller-runtime Runnable, in every replica: no leader election).
type Socket struct {
	Path    string
	Handler http.Handler
	Log     logr.Logger
}

// NeedLeaderElection: every process answers its own probes.
func (s *Socket) NeedLeaderElection() bool { return false }

// Start binds the socket and serves until ctx ends. A socket file left by
// an earlier run of the container (the volume outlives it) is replaced;
// one that another process still answers on is not: two processes must not
// answer one pod's probes.
func (s *Socket) Start(ctx context.Context) error {
	ln, err := Listen(s.Path)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.Log.Info("serving health probes on a unix socket", "socket", s.Path)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("probe socket %s: %w", s.Path, err)
	}
	return nil
}

// Listen binds the unix socket path, replacing a stale socket file (no
// process answers on it) and refusing a live one.
func Listen(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("probe socket: %w", err)
	}
	if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
		_ = c.Close()
		return nil, fmt.Errorf("probe socket %s: another process answers on it", path)
	}
	if rerr := os.Remove(path); rerr != nil {
		return nil, fmt.Errorf("probe socket %s: remove the stale socket: %w", path, rerr)
	}
	ln, err = net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("probe socket: %w", err)
	}
	return ln, nil
}
