// Package netlabtest holds what the tests of the lab's emulated data planes
// share: a lab of namespaces torn down with the test, target hosts that
// answer with their name, connections through a frontend and the counting of
// where fresh connections land. Only tests import it.
package netlabtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// RequireRoot skips a test that needs network namespaces when not root.
func RequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
}

// NewLab makes a lab of one node for the test and removes it when the test
// ends (a failing removal fails the test: it would leak namespaces).
func NewLab(t *testing.T) *netlab.Lab {
	t.Helper()
	RequireRoot(t)
	l, err := netlab.New(context.Background(), netlab.Config{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("lab teardown: %v", err)
		}
	})
	return l
}

// AddHost adds a host namespace to the lab or fails the test.
func AddHost(t *testing.T, l *netlab.Lab, name string) *netlab.Host {
	t.Helper()
	h, err := l.AddHost(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ServeNamed serves HTTP on each port of the host until the test ends: "/"
// answers one line "<name> local=<addr> remote=<addr>" (so a test sees
// which host took a connection), "/healthz" 200 while healthy holds, else
// 503.
func ServeNamed(t *testing.T, h *netlab.Host, name string, healthy *atomic.Bool, ports ...int) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(rw, "%s local=%s remote=%s\n", name, local, r.RemoteAddr)
	})
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	for _, port := range ports {
		ln, err := h.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with Close
		t.Cleanup(func() { srv.Close() })
	}
}

// Conn is one client connection through a frontend, kept open.
type Conn struct {
	c  net.Conn
	br *bufio.Reader
}

// Dial opens a connection from cli to addr ("ip:port"); a frontend that
// sends the SYN nowhere fails it within the timeout.
func Dial(cli *netlab.Host, addr string, timeout time.Duration) (*Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := cli.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c, br: bufio.NewReader(c)}, nil
}

// DialFrom opens a connection from cli's local port to addr
// (SO_REUSEADDR: the port may have just been used).
func DialFrom(cli *netlab.Host, local int, addr string) (*Conn, error) {
	var c net.Conn
	err := cli.Do(func() error {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: cli.IP.AsSlice(), Port: local},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				}); err != nil {
					return err
				}
				return serr
			}}
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Conn{c: c, br: bufio.NewReader(c)}, nil
}

// Get sends a request on the connection and returns the answering host's
// line ("b2 local=… remote=…").
func (c *Conn) Get() (string, error) {
	if err := c.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(c.c, "GET / HTTP/1.1\r\nHost: lb\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	return strings.TrimSpace(line), err
}

// Close closes the connection.
func (c *Conn) Close() { c.c.Close() }

// LocalPort is the connection's source port.
func (c *Conn) LocalPort() int { return c.c.LocalAddr().(*net.TCPAddr).Port }

// Reset closes the connection with a RST (no TIME_WAIT), so that its
// 4-tuple can be used again at once.
func (c *Conn) Reset() {
	if tc, ok := c.c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.c.Close()
}

// Spread opens n fresh connections to addr, eight at a time, and counts the
// hosts that answer each; a connection that cannot be opened (within
// timeout) or answered counts as "".
func Spread(t *testing.T, cli *netlab.Host, addr string, n int, timeout time.Duration) map[string]int {
	t.Helper()
	out := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			name := ""
			if c, err := Dial(cli, addr, timeout); err == nil {
				line, err := c.Get()
				c.Close()
				if err == nil {
					name = strings.Fields(line)[0]
				} else {
					t.Logf("request through the frontend: %v", err)
				}
			}
			mu.Lock()
			out[name]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// ConnTo opens connections to addr until one lands on the named host, and
// returns it open (the others are closed).
func ConnTo(t *testing.T, cli *netlab.Host, addr, name string) *Conn {
	t.Helper()
	for range 60 {
		c, err := Dial(cli, addr, 3*time.Second)
		if err != nil {
			continue
		}
		line, err := c.Get()
		if err == nil && strings.HasPrefix(line, name+" ") {
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection to %s landed on %s in 60 tries", addr, name)
	return nil
}

// WaitFor polls cond until it holds or within has passed; the bound is
// generous (a loaded machine), never part of what a test asserts.
func WaitFor(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
