package traffic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podServer is a pod's process: one HTTP/1.1 server with keep-alive on the
// pod's address, on every TCP container port. "/ws" is a WebSocket
// echo (wsEcho); "/" and any other path answer the pod's name to any method
// (a request body is read and dropped); the readiness probe's path answers
// the same.
type PodServer struct {
	name    string
	srv     *http.Server
	lns     []net.Listener
	closing atomic.Bool // SIGTERM received: every answer says Connection: close

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	ws    map[*wsConn]struct{}
}

// netConnKey is the request context key of the request's connection, so a
// WebSocket (hijacked by the library) can still be reset by the kill.
type netConnKey struct{}

// startPodServer serves on every port of host, with listeners from listen (the
// pod's namespace).
func StartPodServer(name string, listen func(network, addr string) (net.Listener, error), host netip.Addr, ports []int32) (*PodServer, error) {
	s := &PodServer{name: name, conns: map[net.Conn]struct{}{}, ws: map[*wsConn]struct{}{}}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ws" {
				s.wsEcho(w, r)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain")
			if s.closing.Load() {
				w.Header().Set("Connection", "close")
			}
			fmt.Fprintln(w, name)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, netConnKey{}, c)
		},
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch st {
			case http.StateNew:
				s.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(s.conns, c)
			}
		},
	}
	var lns []net.Listener
	for _, p := range ports {
		ln, err := listen("tcp", netip.AddrPortFrom(host, uint16(p)).String())
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("pod %s: %w", name, err)
		}
		lns = append(lns, ln)
	}
	s.lns = lns
	for _, ln := range lns {
		go func() { _ = s.srv.Serve(ln) }()
	}
	return s, nil
}

// The web app's SIGTERM handling is set by its container's environment,
// as a real app's would be: APP_SIGTERM=exit is an app that does not handle
// SIGTERM (the Go runtime's default): it exits at once and the kernel closes
// every connection it holds (exit). Anything else is the graceful shutdown below.
// `zerodrop lab --app-sigterm` sets it on the lab's Deployment.
const (
	AppSigtermEnv      = "APP_SIGTERM"
	AppSigtermExit     = "exit"
	AppSigtermGraceful = "graceful"
)

func ExitsOnSIGTERM(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == AppSigtermEnv && e.Value == AppSigtermExit })
	})
}

// announceWait bounds how long a stopping pod waits for its keep-alive
// clients to take their Connection: close answer (several exchange periods).
const announceWait = 10 * longPeriod

// shutdown is the process's SIGTERM handling, as a well-behaved server does
// it: stop accepting, answer every request from now on with Connection:
// close so each keep-alive client ends its connection after a complete
// exchange, and after announceWait close what is still idle cleanly (FIN)
// and let in-flight requests finish. Closing idle keep-alive connections at
// once (what http.Server.Shutdown alone does) races a client that is just
// sending its next request: it reads EOF, a loss no load balancer causes.
// It returns when every connection is closed or ctx is done.
//
// Every WebSocket gets a close frame with status 1001 (going away) at once
// (goAway), the announcement a WebSocket client reconnects on.
func (s *PodServer) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	var wsDone sync.WaitGroup
	s.mu.Lock()
	for c := range s.ws {
		wsDone.Go(c.goAway)
	}
	s.mu.Unlock()
	wait, cancel := context.WithTimeout(ctx, announceWait)
	defer cancel()
	for s.openConns() > 0 {
		if !SleepCtx(wait, 10*time.Millisecond) {
			break
		}
	}
	// The listeners are closed already: Shutdown closing them again (when
	// Serve has not returned yet) is no failure; it still waited for the
	// connections.
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	done := make(chan struct{})
	go func() { wsDone.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *PodServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// kill is SIGKILL: every connection is closed at once, with a reset.
func (s *PodServer) Kill() { s.end(resetConn) }

// exit is the process exiting at SIGTERM without handling it: every socket
// closed as the kernel closes them at exit — a FIN, or a reset where data
// was unread — with no close frame on a WebSocket and no answer to a request
// in flight.
func (s *PodServer) Exit() { s.end(func(c net.Conn) { _ = c.Close() }) }

// end closes every connection (a WebSocket's too) with closeConn, then the
// server.
func (s *PodServer) end(closeConn func(net.Conn)) {
	s.mu.Lock()
	for c := range s.conns {
		closeConn(c)
	}
	for c := range s.ws {
		closeConn(c.nc)
	}
	s.mu.Unlock()
	_ = s.srv.Close()
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
