package traffic

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestOpenLoopFreshConnections: every request of the open-loop client is on
// its own connection, and both GET and POST (with its body) reach the server.
func TestOpenLoopFreshConnections(t *testing.T) {
	var conns atomic.Int64
	var mu sync.Mutex
	methods := map[string]int{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			methods[r.Method+" "+strings.TrimSpace(string(body))]++
			mu.Unlock()
			io.WriteString(w, "ok\n")
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		},
	}
	ln := listen(t)
	go srv.Serve(ln)
	defer srv.Close()

	rec := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { openLoop(ctx, nil, ln.Addr().String(), 50, poolSize(50), rec); close(done) }()
	testutil.Eventually(t, 30*time.Second, "20 requests", func() (bool, string) {
		s := rec.Snapshot()
		return s.Requests >= 20, ""
	})
	cancel()
	<-done
	s := rec.Snapshot()
	if errs := s.Failed - s.Late; errs != 0 {
		t.Errorf("%d requests failed other than late: %v", errs, s.Failures)
	}
	// Requests stopped mid-flight are not counted, so the server may have
	// seen a few more connections, never fewer.
	if n := conns.Load(); n < s.Requests {
		t.Errorf("%d requests on %d connections: a connection was reused", s.Requests, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if methods["GET "] == 0 || methods["POST zerodrop lab"] == 0 {
		t.Errorf("server saw %v, want GET and POST with its body", methods)
	}
}

// TestOpenLoopNoSilentRetry: a server that closes every connection without
// answering fails every request, each on exactly one connection: the
// client does not retry behind the count.
func TestOpenLoopNoSilentRetry(t *testing.T) {
	ln := listen(t)
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				buf := make([]byte, 4096)
				_, _ = c.Read(buf) // the request, then no answer
				c.Close()
			}()
		}
	}()
	rec := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { openLoop(ctx, nil, ln.Addr().String(), 20, poolSize(20), rec); close(done) }()
	testutil.Eventually(t, 30*time.Second, "10 requests", func() (bool, string) {
		return rec.Snapshot().Requests >= 10, ""
	})
	cancel()
	<-done
	s := rec.Snapshot()
	if s.Failed != s.Requests {
		t.Errorf("%d of %d requests failed, want all", s.Failed, s.Requests)
	}
	// Uncounted requests stopped mid-flight may add connections: at most
	// one per worker.
	if n := conns.Load(); n < s.Requests || n > s.Requests+int64(poolSize(20)) {
		t.Errorf("%d requests, %d connections: want one connection per request", s.Requests, n)
	}
}

// TestOpenLoopKeepsScheduleThroughOutage: a server that never answers
// does not slow the schedule down (a closed-loop client would send fewer
// requests): the pool holds every request until its timeout while new
// ones keep coming, far more at once than a handful of clients would.
func TestOpenLoopKeepsScheduleThroughOutage(t *testing.T) {
	ln := listen(t)
	hold := make(chan struct{})
	var waiting, most atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		n := waiting.Add(1)
		defer waiting.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-hold
	})}
	go srv.Serve(ln)
	defer srv.Close()
	defer close(hold)
	rec := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { openLoop(ctx, nil, ln.Addr().String(), 20, poolSize(20), rec); close(done) }()
	// 20/s with a 2 s timeout: about 40 requests wait at once.
	testutil.Eventually(t, 60*time.Second, "30 requests held at once", func() (bool, string) {
		return most.Load() >= 30, fmt.Sprintf("at most %d", most.Load())
	})
	testutil.Eventually(t, 60*time.Second, "a timed-out request", func() (bool, string) {
		return rec.Snapshot().Failed > 0, ""
	})
	cancel()
	<-done
	s := rec.Snapshot()
	if s.Failed != s.Requests {
		t.Errorf("%d requests, %d failed: want every request failed", s.Requests, s.Failed)
	}
}

// TestOpenLoopCountsBacklogAsLate: when every worker still waits for an
// answer, the schedule's next slots start late and count as failed.
// (With the lab's pool that takes a client that fell behind; two workers
// make it happen here.)
func TestOpenLoopCountsBacklogAsLate(t *testing.T) {
	ln := listen(t)
	hold := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })}
	go srv.Serve(ln)
	defer srv.Close()
	defer close(hold)
	rec := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { openLoop(ctx, nil, ln.Addr().String(), 20, 2, rec); close(done) }()
	testutil.Eventually(t, 60*time.Second, "a late request", func() (bool, string) {
		s := rec.Snapshot()
		return s.Late > 0, ""
	})
	cancel()
	<-done
	s := rec.Snapshot()
	if s.Failed != s.Requests || s.Late == 0 {
		t.Errorf("%d requests, %d failed, %d late: want every request failed, some late", s.Requests, s.Failed, s.Late)
	}
	// The lateness is the backlog's, and the report says so.
	backlog := 0
	for _, f := range s.Failures {
		if f.Kind == KindLate && strings.Contains(f.Detail, "every worker was busy") {
			backlog++
		}
	}
	if backlog == 0 {
		t.Errorf("no late request blamed on the backlog: %v", s.Failures)
	}
}

// TestLongSessionGoAway: a pod's SIGTERM sends its WebSocket clients a
// close frame with status 1001, which the client counts as closed, not
// broken.
func TestLongSessionGoAway(t *testing.T) {
	srv, rec, ended := longSessionAgainstPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-ended
	if s := rec.Snapshot(); s.LongClosed != 1 || s.LongBroken != 0 {
		t.Errorf("closed %d, broken %d, want 1 and 0: %v", s.LongClosed, s.LongBroken, s.Failures)
	}
}

// TestLongSessionKill: the kill at the end of the grace period resets the
// connection: broken, not closed.
func TestLongSessionKill(t *testing.T) {
	srv, rec, ended := longSessionAgainstPod(t)
	srv.Kill()
	<-ended
	s := rec.Snapshot()
	if s.LongClosed != 0 || s.LongBroken != 1 {
		t.Fatalf("closed %d, broken %d, want 0 and 1", s.LongClosed, s.LongBroken)
	}
	if k := s.Failures[0].Kind; k != KindReset && k != KindNoClose {
		t.Errorf("failure kind %s (%s), want reset or noclose", k, s.Failures[0].Detail)
	}
}

// TestLongSessionExit: an app that exits at SIGTERM (--app-sigterm exit)
// ends its WebSockets with no close frame: broken, not closed.
func TestLongSessionExit(t *testing.T) {
	srv, rec, ended := longSessionAgainstPod(t)
	srv.Exit()
	<-ended
	if s := rec.Snapshot(); s.LongClosed != 0 || s.LongBroken != 1 {
		t.Fatalf("closed %d, broken %d, want 0 and 1: %v", s.LongClosed, s.LongBroken, s.Failures)
	}
}

// longSessionAgainstPod starts a pod server and a long session on its /ws,
// and returns once three messages were echoed; ended is closed when the
// session returns.
func longSessionAgainstPod(t *testing.T) (*PodServer, *Recorder, <-chan struct{}) {
	t.Helper()
	srv, err := StartPodServer("pod-a", net.Listen, netip.MustParseAddr("127.0.0.1"), []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws://"+srv.lns[0].Addr().String()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	ended := make(chan struct{})
	go func() { longSession(ctx, c, rec); close(ended) }()
	testutil.Eventually(t, 30*time.Second, "3 echoed messages", func() (bool, string) {
		s := rec.Snapshot()
		return s.Exchanges >= 3, ""
	})
	return srv, rec, ended
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
