package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// startServer serves handler on 127.0.0.1 with the state endpoint's Server
// and TLS as testTLS makes them; it returns the address and the client side.
func startServer(t *testing.T, s *Server) (string, *tls.Config) {
	t.Helper()
	serverTLS, clientTLS := testTLS(t)
	ctx, cancel := context.WithCancel(context.Background())
	bound := make(chan net.Addr, 1)
	s.Addr, s.TLS, s.Log, s.Bound = "127.0.0.1:0", serverTLS, testr.New(t), func(a net.Addr) { bound <- a }
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("state endpoint: %v", err)
		}
	})
	select {
	case a := <-bound:
		return a.String(), clientTLS
	case err := <-done:
		t.Fatalf("state endpoint did not start: %v", err)
		return "", nil
	}
}

// TestStateEndpointTrustsOnlyVerifiedPeers: a connection is served — and
// trusted by the guard — only once its handshake has verified the control
// role's client certificate; one without it is closed untrusted. At most
// MaxConnections authenticated connections are served at once: the next
// one is closed, and once one goes its place is free again.
func TestStateEndpointTrustsOnlyVerifiedPeers(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		MaxConnections: 2}
	addr, clientTLS := startServer(t, s)

	// get sends one request on a kept-alive connection and reads the
	// answer's status line.
	get := func(c *tls.Conn) (string, error) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return "", err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	}
	dial := func(cfg *tls.Config) (*tls.Conn, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}

	noCert := clientTLS.Clone()
	noCert.Certificates = nil
	if c, err := dial(noCert); err == nil {
		if line, err := get(c); err == nil {
			t.Errorf("a client without the control role's certificate was answered %q", line)
		}
	}
	if st := s.Guard().Stats(); st.Trusted != 0 {
		t.Errorf("guard trusted %d connections after a client without a certificate, want 0", st.Trusted)
	}

	var kept []*tls.Conn
	for i := 0; i < 2; i++ {
		c, err := dial(clientTLS)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := get(c); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("authenticated connection %d: %q, %v", i, line, err)
		}
		kept = append(kept, c)
	}
	third, err := dial(clientTLS)
	if err == nil {
		if line, err := get(third); err == nil {
			t.Errorf("a third authenticated connection was served (%q) with MaxConnections 2", line)
		}
	}
	_ = kept[0].Close()
	// The server sees the close and frees its place.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dial(clientTLS)
		if err == nil {
			if line, err := get(c); err == nil && strings.Contains(line, "200") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no authenticated connection served within 10 s of one closing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := s.Guard().Stats(); st.Trusted < 3 {
		t.Errorf("guard trusted %d connections, want at least 3", st.Trusted)
	}
}

// TestSecondServerBindsAlternate (issue 50): a second data-plane pod on the
// node finds the state port in use and serves on the alternate instead of
// failing; a third, with both in use, fails and names both.
func TestSecondServerBindsAlternate(t *testing.T) {
	serverTLS, _ := testTLS(t)
	port, alt := freePort(t), freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	altAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(alt)))
	start := func() (net.Addr, error) {
		ctx, cancel := context.WithCancel(context.Background())
		bound := make(chan net.Addr, 1)
		done := make(chan error, 1)
		s := &Server{Addr: addr, AlternateAddr: altAddr, TLS: serverTLS, Log: testr.New(t), Handler: http.NotFoundHandler(),
			Bound: func(a net.Addr) { bound <- a }}
		go func() { done <- s.Start(ctx) }()
		select {
		case a := <-bound:
			t.Cleanup(func() {
				cancel()
				<-done
			})
			return a, nil
		case err := <-done:
			cancel()
			return nil, err
		}
	}
	for i, want := range []string{addr, altAddr} {
		a, err := start()
		if err != nil || a.String() != want {
			t.Fatalf("server %d: bound %v, %v; want %s", i, a, err, want)
		}
	}
	if a, err := start(); err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), altAddr) {
		t.Fatalf("third server: bound %v, %v; want an error naming both addresses in use", a, err)
	}
}
