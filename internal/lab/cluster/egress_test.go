package cluster

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEgressProxy: the API server's egress proxy answers a CONNECT with
// 200 and then carries bytes both ways to the dialed target, including
// what the client sent right behind its request; it refuses other methods;
// and Close ends the tunnels in progress and returns (the lab's teardown
// waits on it).
func TestEgressProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			// It echoes, and keeps its side open after the client's end
			// (a target that holds a tunnel): only Close ends it.
			go func() { _, _ = io.Copy(c, c); <-stop; c.Close() }()
		}
	}()
	socket := filepath.Join(t.TempDir(), "egress.sock")
	var d net.Dialer
	p, err := ServeEgress(socket, d.DialContext, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()

	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	addr := echo.Addr().String()
	if _, err := io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\nearly\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v, want 200", addr, resp, err)
	}
	if _, err := io.WriteString(c, "later\n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"early\n", "later\n"} {
		if got, err := br.ReadString('\n'); got != want || err != nil {
			t.Fatalf("through the tunnel: %q %v, want the echo %q", got, err, want)
		}
	}

	other, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_ = other.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(other, "GET / HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(other).ReadString('\n'); !strings.Contains(line, "405") {
		t.Errorf("GET through the egress proxy: %q %v, want 405", line, err)
	}

	// Close with the tunnel still open: it ends it and returns.
	done := make(chan struct{})
	closed = true
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a tunnel open")
	}
	if _, err := br.ReadString('\n'); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("the tunnel after Close: %v, want it ended", err)
	}
	if _, err := net.Dial("unix", socket); err == nil {
		t.Errorf("the egress proxy still accepts after Close")
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}
