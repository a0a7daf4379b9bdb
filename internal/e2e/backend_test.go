package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a real loopback HTTP server standing in for a pod.
type backend struct {
	name     string
	addr     string // host:port it listens on (127.18.x.y)
	requests atomic.Int64
	srv      *http.Server
}

// startBackend serves "<name>\n" on addr until the test ends.
func startBackend(t *testing.T, name, addr string) *backend {
	t.Helper()
	b := &backend{name: name, addr: addr}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	b.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.requests.Add(1)
			fmt.Fprintln(w, name)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

// shutdown stops accepting and lets in-flight and idle keep-alive
// connections finish, as a pod does on SIGTERM.
func (b *backend) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.srv.Shutdown(ctx)
}

// get makes one request on a new connection and returns the body.
func get(url string) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(body)), err
}

// longConn is one keep-alive connection through the load balancer on which
// requests are sent one at a time: a long-lived connection.
type longConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialLong(addr string) (*longConn, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return &longConn{conn: c, r: bufio.NewReader(c)}, nil
}

// roundTrip sends one request and returns the backend's name.
func (l *longConn) roundTrip() (string, error) {
	_ = l.conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(l.conn, "GET / HTTP/1.1\r\nHost: lb\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(l.r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body)), err
}

// closedCleanly reports whether the peer closed the connection with a FIN
// (EOF) rather than a reset.
func (l *longConn) closedCleanly() error {
	_ = l.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := l.r.ReadByte()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err == nil {
		return errors.New("unexpected data")
	}
	return err
}
