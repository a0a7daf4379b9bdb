package connguard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/metrics"
)

// guarded is a guarded listener on 127.0.0.1 whose accepted connections the
// test receives in order.
type guarded struct {
	l     *Listener
	conns chan net.Conn
}

func listen(t *testing.T, lim Limits) *guarded {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &guarded{l: New(ln, lim), conns: make(chan net.Conn, 1000)}
	t.Cleanup(func() { _ = g.l.Close() })
	go func() {
		for {
			c, err := g.l.Accept()
			if err != nil {
				close(g.conns)
				return
			}
			g.conns <- c
		}
	}()
	return g
}

// dial opens a connection from the loopback address src (127.0.0.0/8 is
// all loopback on Linux) and waits until the listener has accepted it, so
// that connections are accepted in the order they are dialled. It returns
// the client side and the server side.
func (g *guarded) dial(t *testing.T, src string) (net.Conn, net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", g.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	select {
	case s := <-g.conns:
		t.Cleanup(func() { _ = s.Close() })
		return c, s
	case <-time.After(5 * time.Second):
		t.Fatal("the listener did not accept the connection within 5 s")
		return nil, nil
	}
}

// closedByServer reports whether the server closed c: a read sees EOF (or
// a reset) within wait; a read still blocked at wait means it is open.
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestEvictionOrder: when a cap is exceeded the oldest pending connection
// goes (of its source for the per-source cap, of all for the global cap),
// never the newest; a flood from one source never evicts another source's
// connection; trusted connections are never evicted; a connection pending
// longer than Handshake is closed.
func TestEvictionOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limits
		// srcs are dialled in order; trust lists the indexes marked
		// trusted right after being accepted.
		srcs  []string
		trust map[int]bool
		// closed lists the indexes the listener must have closed; the
		// others must be open.
		closed map[int]bool
		stats  Stats
	}{
		{name: "per-source cap closes that source's oldest", lim: Limits{Pending: 100, PendingPerSource: 2, Handshake: time.Minute},
			srcs:   []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.2"},
			closed: map[int]bool{0: true, 1: true}, stats: Stats{Accepted: 4, EvictedSource: 2}},
		{name: "a flood from one source never evicts another's", lim: Limits{Pending: 100, PendingPerSource: 2, Handshake: time.Minute},
			srcs:   []string{"127.0.0.3", "127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.2"},
			closed: map[int]bool{1: true, 2: true, 3: true}, stats: Stats{Accepted: 6, EvictedSource: 3}},
		{name: "global cap closes the oldest of all", lim: Limits{Pending: 3, PendingPerSource: 10, Handshake: time.Minute},
			srcs:   []string{"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.4", "127.0.0.5"},
			closed: map[int]bool{0: true, 1: true}, stats: Stats{Accepted: 5, EvictedGlobal: 2}},
		{name: "trusted connections are never evicted and free their place", lim: Limits{Pending: 2, PendingPerSource: 1, Handshake: time.Minute},
			srcs:   []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.4"},
			trust:  map[int]bool{0: true},
			closed: map[int]bool{1: true, 2: true}, stats: Stats{Accepted: 5, Trusted: 1, EvictedSource: 1, EvictedGlobal: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := listen(t, tc.lim)
			var clients, servers []net.Conn
			for i, src := range tc.srcs {
				c, s := g.dial(t, src)
				if tc.trust[i] && !Trust(s) {
					t.Fatalf("Trust(connection %d) = false on a pending connection", i)
				}
				clients, servers = append(clients, c), append(servers, s)
			}
			// Evictions happen within Accept, before it returns: what is
			// open now stays open.
			for i, c := range clients {
				wait := 200 * time.Millisecond
				if tc.closed[i] {
					wait = 5 * time.Second
				}
				if got := closedByServer(c, wait); got != tc.closed[i] {
					t.Errorf("connection %d from %s: closed=%v, want %v", i, tc.srcs[i], got, tc.closed[i])
				}
			}
			for i := range servers {
				if tc.closed[i] && Trust(servers[i]) {
					t.Errorf("Trust(connection %d) = true after the listener closed it", i)
				}
			}
			if got := g.l.Stats(); got != tc.stats {
				t.Errorf("stats %+v, want %+v", got, tc.stats)
			}
		})
	}
}

// TestHandshakeBound: a connection still pending after Handshake is
// closed; a trusted one is not; the metric counts the expiry.
func TestHandshakeBound(t *testing.T) {
	g := listen(t, Limits{Pending: 10, PendingPerSource: 10, Handshake: 300 * time.Millisecond})
	idle, _ := g.dial(t, "127.0.0.2")
	kept, s := g.dial(t, "127.0.0.2")
	if !Trust(s) {
		t.Fatal("Trust on a fresh pending connection answered false")
	}
	start := time.Now()
	if !closedByServer(idle, 10*time.Second) {
		t.Fatal("a connection pending past the handshake bound is still open")
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("pending connection closed after %s, before its handshake bound of 300ms", took)
	}
	if closedByServer(kept, time.Second) {
		t.Error("a trusted connection was closed by the handshake bound")
	}
	if got := metrics.Sum(g.l.Collector("test")); got != 1 {
		t.Errorf("zerodrop_connguard_closed_total sums to %v, want 1 (the expiry)", got)
	}
	if n := g.l.PendingCount(); n != 0 {
		t.Errorf("%d connections still pending, want 0", n)
	}
}

// TestTrustRequest: an HTTP handler marks its request's connection trusted
// after authenticating it; a connection whose request never authenticates
// is closed at the handshake bound even while kept alive.
func TestTrustRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := New(ln, Limits{Pending: 10, PendingPerSource: 10, Handshake: 500 * time.Millisecond})
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer ok" && !TrustRequest(r) {
			http.Error(w, "not trusted", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "hello")
	})}
	go func() { _ = srv.Serve(gl) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, tc := range []struct {
		token      string
		wantClosed bool
	}{{"ok", false}, {"bad", true}} {
		c, err := net.Dial("tcp", gl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tc.token+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil || !strings.Contains(string(buf[:n]), "hello") {
			t.Fatalf("token %s: answer %q, %v", tc.token, buf[:n], err)
		}
		// Kept alive past the handshake bound.
		time.Sleep(time.Second)
		if got := closedByServer(c, 200*time.Millisecond); got != tc.wantClosed {
			t.Errorf("token %s: kept-alive connection closed=%v after the handshake bound, want %v", tc.token, got, tc.wantClosed)
		}
	}
	if TrustRequest(httptestRequest()) {
		t.Error("TrustRequest answered true for a request without ConnContext")
	}
}

func httptestRequest() *http.Request {
	r, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://x/", nil)
	return r
}

// TestBadLimits: a guard without bounds refuses to accept, with a clear
// error.
func TestBadLimits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(ln, Limits{Pending: 10}).Accept()
	if err == nil || !strings.Contains(err.Error(), "must all be positive") {
		t.Fatalf("Accept with zero limits: %v, want an error naming the limits", err)
	}
}
