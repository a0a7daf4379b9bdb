package outside

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve answers every connection ln accepts with handle, until the test
// ends.
func serve(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); handle(c) })
		}
	})
	return ln.Addr().String()
}

// TestOpenLoop: the schedule does not wait for answers. The server answers
// nothing until it holds every request of the schedule at once, then
// answers them all: an open-loop client gets every answer, a client that
// waited for each answer before its next request would time out on the
// first and never get there.
func TestOpenLoop(t *testing.T) {
	const n = 5
	var mu sync.Mutex
	held := 0
	all := make(chan struct{})
	target := serve(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		mu.Lock()
		if held++; held == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
		case <-time.After(30 * time.Second):
		}
	})
	got := Run(context.Background(), Config{Target: target, Rate: 50, MaxRequests: n, Timeout: 20 * time.Second})
	if got.Sent != n || got.OK != n || got.Failed != 0 {
		t.Errorf("sent %d, ok %d, failed %d %v: want %d sent and answered, none failed", got.Sent, got.OK, got.Failed, got.FailedByKind, n)
	}
}

// TestFailureKinds: each way a request can fail is counted once per
// request, under its kind, in its second too.
func TestFailureKinds(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	respond := func(head string) func(net.Conn) {
		return func(c net.Conn) {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				_, _ = io.WriteString(c, head)
			}
		}
	}
	for _, tc := range []struct {
		name, target string
		timeout      time.Duration
		kind         string // "" : none fails
	}{
		{"ok", serve(t, respond("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")), 0, ""},
		{"a 4xx answer is an answer", serve(t, respond("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")), 0, ""},
		{"5xx", serve(t, respond("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")), 0, Kind5xx},
		{"refused", refused, 0, KindRefused},
		{"closed before the answer", serve(t, respond("")), 0, KindEOF},
		{"body cut short", serve(t, respond("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nok\n")), 0, KindEOF},
		{"reset", serve(t, func(c net.Conn) {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
		}), 0, KindReset},
		{"held past the timeout", serve(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }), 300 * time.Millisecond, KindTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			got := Run(context.Background(), Config{Target: tc.target, Rate: 100, MaxRequests: n, Timeout: tc.timeout})
			var want int64
			if tc.kind != "" {
				want = n
			}
			if got.Sent != n || got.Failed != want || got.FailedByKind[tc.kind] != want || got.OK != n-want {
				t.Errorf("sent %d, ok %d, failed %d %v: want %d sent, %d failed as %q", got.Sent, got.OK, got.Failed, got.FailedByKind, n, want, tc.kind)
			}
			var sent, failed int64
			for _, s := range got.Seconds {
				sent, failed = sent+s.Sent, failed+s.Failed
			}
			if sent != got.Sent || failed != got.Failed {
				t.Errorf("per second: %d sent, %d failed; in all %d, %d", sent, failed, got.Sent, got.Failed)
			}
		})
	}
}

// TestStopFinishesRequests: ending the schedule stops new requests, and a
// request under way still finishes and counts.
func TestStopFinishesRequests(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	target := serve(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		cancel() // the schedule ends while this request is under way
		time.Sleep(100 * time.Millisecond)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	})
	got := Run(ctx, Config{Target: target, Rate: 1, MaxRequests: 1000, Timeout: 10 * time.Second})
	if got.Sent != 1 || got.OK != 1 {
		t.Errorf("sent %d, ok %d, failed %v: want the one request under way at the stop answered, and no other", got.Sent, got.OK, got.FailedByKind)
	}
}

// TestMainWritesCounts: the process writes what it counted to --out, and
// ReadCounts reads it back.
func TestMainWritesCounts(t *testing.T) {
	target := serve(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
		}
	})
	out := filepath.Join(t.TempDir(), "counts.json")
	var stderr strings.Builder
	if code := Main([]string{"--target", target, "--rate", "20", "--max-requests", "4", "--out", out}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got, err := ReadCounts(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sent != 4 || got.Failed != 4 || got.FailedByKind[Kind5xx] != 4 || got.Target != target || got.Rate != 20 {
		t.Errorf("counts %+v: want 4 sent to %s at 20/s, 4 failed as 5xx", got, target)
	}
	if code := Main([]string{"--target", target, "--out", out}, &stderr); code != 2 {
		t.Errorf("without --rate: exit %d, want 2", code)
	}
}
