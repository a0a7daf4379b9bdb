package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"zerodrop.dev/zerodrop/internal/connguard"
)

// Server serves the endpoint in every replica: the standby answers from the
// provider's state too.
type Server struct {
	Addr    string
	Handler http.Handler
	Logger  logr.Logger
	// Registerer, when set, gets the listener's guard collector
	// (zerodrop_connguard_closed_total{listener="drain"}).
	Registerer prometheus.Registerer
	// ShutdownTimeout is how long after the replica stops a call is still
	// answered at least (default 10s: a call still sending its request).
	// A call the Handler holds for a pod is answered until that pod's
	// deadline, however much later (Handler.LongestDeadline).
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout and ReadTimeout bound reading a request (default
	// 10s each), IdleTimeout a kept-alive connection between requests
	// (default 30s), WriteTimeout an answer (default 30s). The Handler
	// extends the read and write deadlines of a call it holds to the pod's
	// deadline, so none of them cuts the long-held answer.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout, WriteTimeout time.Duration
	// MaxPending and MaxPendingPerSource bound the connections held whose
	// call has not found a terminating pod yet (connguard: the oldest is
	// closed beyond; default 1024 and 256), Handshake how long one stays so
	// (default 30s: a request read, then CacheLag). A call that finds its
	// pod is bounded by the Handler's own caps instead.
	MaxPending, MaxPendingPerSource int
	Handshake                       time.Duration

	mu       sync.Mutex
	finished chan struct{} // closed once the server has shut down
}

// deadlines is implemented by a handler that knows until when the calls it
// holds may last (*Handler).
type deadlines interface{ LongestDeadline() time.Time }

// NeedLeaderElection: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orDefaultInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// Start serves until ctx is done. It returns as soon as the listener is
// closed, so that the manager goes on stopping (and releases the leader
// lease) at once; calls in flight are still answered in the background
// until Wait returns. Cutting them would make the kubelet run the pod's
// preStop hook to an error and stop the pod while it may still be in a load
// balancer.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle(Path, s.Handler)
	// Slow or idle connections must not pile up: any pod can call.
	srv := &http.Server{Handler: mux,
		ReadHeaderTimeout: orDefault(s.ReadHeaderTimeout, 10*time.Second),
		ReadTimeout:       orDefault(s.ReadTimeout, 10*time.Second),
		IdleTimeout:       orDefault(s.IdleTimeout, 30*time.Second),
		WriteTimeout:      orDefault(s.WriteTimeout, 30*time.Second),
	}
	raw, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("drain endpoint: %w", err)
	}
	// Any pod can connect: connections that hold no call for a
	// terminating pod are bounded per source and in all (Handler trusts
	// the others).
	ln := connguard.New(raw, connguard.Limits{Pending: orDefaultInt(s.MaxPending, DefaultMaxCalls),
		PendingPerSource: orDefaultInt(s.MaxPendingPerSource, 256), Handshake: orDefault(s.Handshake, 30*time.Second)})
	srv.ConnContext = connguard.ConnContext
	if s.Registerer != nil {
		if err := s.Registerer.Register(ln.Collector("drain")); err != nil {
			s.Logger.Error(err, "the drain endpoint's connection metric is not exported")
		}
	}
	floor := orDefault(s.ShutdownTimeout, 10*time.Second)
	finished := make(chan struct{})
	s.mu.Lock()
	s.finished = finished
	s.mu.Unlock()
	s.Logger.Info("serving the drain endpoint", "addr", ln.Addr().String())
	go func() {
		defer close(finished)
		<-ctx.Done()
		stopped := time.Now()
		shutdownCtx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Cut what is left only once every call held has passed its
		// deadline; a call that finds its pod meanwhile moves the bound.
		go func() {
			for {
				wait := time.Until(s.bound(stopped, floor))
				if wait <= 0 {
					cancel()
					return
				}
				t := time.NewTimer(wait)
				select {
				case <-shutdownCtx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			s.Logger.Info("drain calls still in flight cut at shutdown", "after", time.Since(stopped).Round(time.Millisecond), "err", err)
			_ = srv.Close()
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bound is when a stopping server cuts the calls still open: the floor
// after it stopped, or the longest deadline held plus the time to answer.
func (s *Server) bound(stopped time.Time, floor time.Duration) time.Time {
	b := stopped.Add(floor)
	if d, ok := s.Handler.(deadlines); ok {
		if last := d.LongestDeadline().Add(answerSlack); last.After(b) {
			b = last
		}
	}
	return b
}

// Wait blocks until the calls in flight when Start's context ended have been
// answered (or cut at the bound); at once if Start never ran.
func (s *Server) Wait() {
	s.mu.Lock()
	finished := s.finished
	s.mu.Unlock()
	if finished != nil {
		<-finished
	}
}
