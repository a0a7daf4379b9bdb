package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a loopback HTTP server that counts the connections and requests
// it sees.
type server struct {
	*httptest.Server
	conns    atomic.Int64
	requests atomic.Int64
	answered atomic.Int64 // 2xx answers written
	posts    atomic.Int64
}

func newServer(t *testing.T, handle func(n int64, w http.ResponseWriter, r *http.Request) bool) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.requests.Add(1) - 1
		if r.Method == http.MethodPost {
			s.posts.Add(1)
		}
		if handle(n, w, r) {
			s.answered.Add(1)
		}
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// check asserts what holds for every run.
func check(t *testing.T, res result, want int) {
	t.Helper()
	if res.Requests != want || res.OK+res.Failed != res.Requests {
		t.Fatalf("requests %d, ok %d, failed %d; want %d requests, each ok or failed", res.Requests, res.OK, res.Failed, want)
	}
	if res.Late > res.Failed {
		t.Fatalf("late %d > failed %d", res.Late, res.Failed)
	}
	if wantRate := 100 * float64(res.Failed) / float64(res.Requests); res.FailureRate != wantRate {
		t.Fatalf("failure_rate %v, want %v", res.FailureRate, wantRate)
	}
	if !res.End.After(res.Start) {
		t.Fatalf("start %s, end %s", res.Start, res.End)
	}
}

// TestCountsFailedAnswers: every 4th request the server sees answers 503
// and every 20th (another one) outlasts the client's timeout; both count as
// failed, and every request had its own connection.
func TestCountsFailedAnswers(t *testing.T) {
	s := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) bool {
		switch {
		case n%4 == 0:
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return false
		case n%20 == 2:
			// Reading the body lets the server notice the client hang up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done(): // the client gave up
			case <-time.After(3 * time.Second):
			}
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	})
	cfg := config{url: s.URL + "/", rate: 200, duration: 2 * time.Second, timeout: time.Second}
	res := run(context.Background(), cfg)
	t.Logf("%+v", res)
	check(t, res, 400)
	if got := s.requests.Load(); got != 400 {
		t.Fatalf("server saw %d requests, want 400 (late ones are sent too)", got)
	}
	if got := s.conns.Load(); got != 400 {
		t.Fatalf("server saw %d connections for 400 requests: connections were reused", got)
	}
	if got := s.posts.Load(); got != 200 {
		t.Fatalf("server saw %d POSTs, want every other request", got)
	}
	// 100 answered 503 and 20 timed out; a late request fails even when
	// answered 200, so those add at most res.Late.
	if res.Failed < 120 || res.Failed > 120+res.Late {
		t.Fatalf("failed %d (late %d), want 120 plus at most the late ones", res.Failed, res.Late)
	}
	if res.OK > int(s.answered.Load()) {
		t.Fatalf("ok %d, but the server answered 2xx only %d times", res.OK, s.answered.Load())
	}
	if !strings.Contains(res.FirstError+res.LastError, "503") && !strings.Contains(res.FirstError+res.LastError, "Timeout") {
		t.Fatalf("error samples %q, %q name neither a 503 nor a timeout", res.FirstError, res.LastError)
	}
}

// TestServerGoneMidRun: after the server closes, every request fails
// (connection refused), and the run still completes its schedule.
func TestServerGoneMidRun(t *testing.T) {
	var once sync.Once
	closeNow := make(chan struct{})
	s := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) bool {
		if n == 50 {
			once.Do(func() { close(closeNow) })
		}
		w.WriteHeader(http.StatusNoContent)
		return true
	})
	go func() { <-closeNow; s.Close() }()
	cfg := config{url: s.URL + "/", rate: 100, duration: 2 * time.Second, timeout: time.Second}
	res := run(context.Background(), cfg)
	t.Logf("%+v", res)
	check(t, res, 200)
	served := int(s.answered.Load())
	if served >= 200 || served < 50 {
		t.Fatalf("server answered %d requests; the test meant it to stop after about 50", served)
	}
	if res.OK > served || res.Failed < 200-served {
		t.Fatalf("ok %d, failed %d, but the server answered only %d of 200", res.OK, res.Failed, served)
	}
	if !strings.Contains(res.LastError, "connection refused") {
		t.Fatalf("last error %q, want a refused connection", res.LastError)
	}
}

func TestParseFlags(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good := []string{"--url", "http://127.0.0.1:8080/", "--rate", "200"}
	cfg, err := parseFlags(append(good, "--duration", "30s"), now)
	if err != nil || cfg.requests() != 6000 || cfg.timeout != time.Second {
		t.Fatalf("--duration 30s: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags(append(good, "--until", "2026-01-02T03:05:05Z"), now)
	if err != nil || cfg.duration != time.Minute {
		t.Fatalf("--until a minute later: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{"--rate", "200", "--duration", "30s"},
		{"--url", "127.0.0.1:8080", "--rate", "200", "--duration", "30s"},
		append(good[:2:2], "--rate", "0", "--duration", "30s"),
		good,
		append(good, "--duration", "11m"),
		append(good, "--until", "2026-01-02T03:00:00Z"),
		append(good, "--until", "2026-01-02T04:00:00Z"),
		append(good, "--until", "tomorrow"),
		append(good, "--duration", "30s", "--until", "2026-01-02T03:05:05Z"),
		append(good, "--duration", "1ms"),
		append(good, "--duration", "30s", "extra"),
	} {
		if _, err := parseFlags(args, now); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
