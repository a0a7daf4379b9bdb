package drainrelay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/testnet"
)

const pod = "shop/web-1"

// drainServer answers the drain call with what answer returns for the
// call's number (from 1); answer may cut the connection instead (a replica
// killed while it held the call).
func drainServer(t *testing.T, answer func(n int64, w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != drain.Path || r.URL.Query().Get("pod") != pod {
			t.Errorf("relay called %s, want %s?pod=%s", r.URL, drain.Path, pod)
		}
		answer(calls.Add(1), w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// cut closes the call's connection without an answer, as the kill of the
// replica holding it does.
func cut(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, as at a SIGKILL with the request unread
	}
	_ = conn.Close()
}

func drained(w http.ResponseWriter) {
	w.Header().Set(drain.ResultHeader, "drained")
	_, _ = io.WriteString(w, "drained")
}

func relay(t *testing.T, target string, maxWait time.Duration) *httptest.Server {
	t.Helper()
	h, err := NewHandler(Options{Target: target, Pod: pod, MaxWait: maxWait, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func hook(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("hook call: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(drain.ResultHeader), strings.TrimSpace(string(b))
}

// A call cut twice (two replicas killed while holding it) and a replica that
// answers busy: the hook still gets the third replica's answer.
func TestRelayCallsAgainUntilAnswered(t *testing.T) {
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1, 2:
			cut(t, w)
		case 3:
			http.Error(w, "busy: too many drain calls held", http.StatusServiceUnavailable)
		default:
			drained(w)
		}
	})
	r := relay(t, target.URL, time.Minute)
	code, result, body := hook(t, r.URL+drain.Path+"?pod="+pod)
	if code != http.StatusOK || result != "drained" || body != "drained" {
		t.Errorf("hook got %d %q %q, want 200 drained", code, result, body)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d calls to the drain endpoint, want 4", n)
	}
}

// Answers other than 503 and 404 are the drain endpoint's verdict and pass
// as they are: the answer at the pod's deadline ("timeout") is not retried.
func TestRelayPassesAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		result string
	}{
		{"timeout", http.StatusOK, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
				w.Header().Set(drain.ResultHeader, tc.result)
				w.WriteHeader(tc.code)
				_, _ = io.WriteString(w, tc.result)
			})
			code, result, body := hook(t, relay(t, target.URL, time.Minute).URL+drain.Path)
			if code != tc.code || result != tc.result || body != tc.result || calls.Load() != 1 {
				t.Errorf("hook got %d %q %q after %d calls, want %d %q once", code, result, body, calls.Load(), tc.code, tc.result)
			}
		})
	}
}

// Nothing answers within MaxWait: the hook gets the drain endpoint's own
// "timeout" (its preStop hook fails), not a hang.
func TestRelayGivesUpAtMaxWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	code, result, body := hook(t, relay(t, "http://"+addr, 300*time.Millisecond).URL+drain.Path)
	if code != http.StatusGatewayTimeout || result != "timeout" || !strings.Contains(body, "refused") {
		t.Errorf("hook got %d %q %q, want 504 timeout naming the last error", code, result, body)
	}
}

// The hook's connection ends (the kubelet gave up): the relay stops calling.
func TestRelayStopsWithItsCaller(t *testing.T) {
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { cut(t, w) })
	h, err := NewHandler(Options{Target: target.URL, Pod: pod, MaxWait: time.Hour, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, drain.Path, nil).WithContext(ctx)
	done := make(chan struct{})
	go func() { h.ServeHTTP(httptest.NewRecorder(), req); close(done) }()
	for wait := time.Now().Add(time.Minute); calls.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("the relay did not call the drain endpoint twice")
		}
	}
	cancel()
	<-done
	n := calls.Load()
	time.Sleep(50 * time.Millisecond)
	if m := calls.Load(); m != n {
		t.Errorf("%d more calls after the caller left", m-n)
	}
}

func TestRelayOwnPodOnly(t *testing.T) {
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { drained(w) })
	code, _, _ := hook(t, relay(t, target.URL, time.Minute).URL+drain.Path+"?pod=shop/other")
	if code != http.StatusForbidden || calls.Load() != 0 {
		t.Errorf("a call about another pod got %d and made %d drain calls, want 403 and none", code, calls.Load())
	}
}

func TestNewHandlerRejects(t *testing.T) {
	for _, o := range []Options{
		{Target: "10.96.0.90:9090", Pod: pod, MaxWait: time.Second},
		{Target: "https://10.96.0.90:9090", Pod: pod, MaxWait: time.Second},
		{Target: "http://10.96.0.90:9090/x", Pod: pod, MaxWait: time.Second},
		{Target: "http://10.96.0.90:9090", Pod: "web-1", MaxWait: time.Second},
		{Target: "http://10.96.0.90:9090", Pod: "shop/", MaxWait: time.Second},
		{Target: "http://10.96.0.90:9090", Pod: pod},
	} {
		if _, err := NewHandler(o); err == nil {
			t.Errorf("NewHandler(%+v) accepted", o)
		}
	}
}

// A connect that hangs (the Service sent it to a replica that is gone) is
// cut at DialTimeout and made again: several attempts within MaxWait, not
// one connect waiting out the grace period.
func TestRelayConnectTimesOut(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testnet.SilentPort(t, "127.0.0.1"))
	h, err := NewHandler(Options{Target: "http://" + addr, Pod: pod, MaxWait: 3 * time.Second, Retry: 10 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	code, result, body := hook(t, srv.URL+drain.Path)
	var attempts int
	if _, err := fmt.Sscanf(body, "timeout: no answer after %d attempts", &attempts); err != nil || code != http.StatusGatewayTimeout || result != "timeout" {
		t.Fatalf("hook got %d %q %q, want 504 timeout after some attempts", code, result, body)
	}
	if attempts < 2 || !strings.Contains(body, "timeout") {
		t.Errorf("%d attempts in 3 s (%s): want the hung connect cut and made again", attempts, body)
	}
}

func refused(w http.ResponseWriter) {
	w.Header().Set(drain.ResultHeader, "refused")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "no terminating pod of that name")
}

// A replica whose cache lags longer than the drain endpoint's CacheLag (a
// slow API server, a re-list) refuses the pod with 404; the relay calls
// again, and the hook gets the answer of a replica that sees the deletion.
func TestRelayRetriesARefusalWithinTheWindow(t *testing.T) {
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n <= 3 {
			refused(w)
			return
		}
		drained(w)
	})
	code, result, body := hook(t, relay(t, target.URL, time.Minute).URL+drain.Path+"?pod="+pod)
	if code != http.StatusOK || result != "drained" || body != "drained" || calls.Load() != 4 {
		t.Errorf("hook got %d %q %q after %d calls, want 200 drained after 3 refusals", code, result, body, calls.Load())
	}
}

// A pod that is not terminating (its container restarted after a liveness
// failure also runs the preStop hook) is refused for good: the relay gives
// up with the drain endpoint's 404 once its refusal window (about twice
// the drain endpoint's CacheLag) has passed, not at MaxWait.
func TestRelayGivesUpOnARefusalAfterTheWindow(t *testing.T) {
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { refused(w) })
	h, err := NewHandler(Options{Target: target.URL, Pod: pod, MaxWait: 2 * time.Minute, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	code, result, body := hook(t, srv.URL+drain.Path+"?pod="+pod)
	if code != http.StatusNotFound || result != "refused" || body != "no terminating pod of that name" {
		t.Fatalf("hook got %d %q %q after %d calls, want the 404 refusal at the end of the window, before MaxWait", code, result, body, calls.Load())
	}
	if n := calls.Load(); n < 2 {
		t.Errorf("%d call(s) to the drain endpoint, want the refusal called again within the window", n)
	}
}

// logLines collects what Run writes to stderr, one slog record per Write.
type logLines struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.all.Write(p)
	l.mu.Unlock()
	select {
	case l.lines <- string(p):
	default:
	}
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// runRelay runs `zerodrop drain-relay` (Run) on a free loopback port with
// args after the target and pod, and returns its address once it serves.
func runRelay(t *testing.T, target string, args ...string) string {
	t.Helper()
	stderr := &logLines{lines: make(chan string, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- Run(ctx, append([]string{"--listen", "127.0.0.1:0", "--target", target, "--pod", pod}, args...), stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	timeout := time.After(time.Minute)
	for {
		select {
		case line := <-stderr.lines:
			var rec struct{ Msg, Address string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" && rec.Address != "" {
				return rec.Address
			}
		case code := <-exited:
			exited <- code
			t.Fatalf("the relay exited %d before serving: %s", code, stderr.String())
		case <-timeout:
			t.Fatalf("the relay did not serve within a minute: %s", stderr.String())
		}
	}
}

// Any pod of the cluster can connect to the relay, which has 64 MiB: a
// kept-alive connection left idle after its answer is closed by the relay
// (its default idle timeout is a few seconds).
func TestRelayServerClosesIdleConnections(t *testing.T) {
	target, _ := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { drained(w) })
	addr := runRelay(t, target.URL)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s?pod=%s HTTP/1.1\r\nHost: relay\r\n\r\n", drain.Path, pod)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("answer %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	// Idle from now on: the relay must close it (EOF), not keep it open.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection after the answer: read got %v, want EOF (closed by the relay)", err)
	}
}

// serverTimeouts are the relay server's timeouts, short for the tests.
var serverTimeouts = []string{"--read-timeout", "300ms", "--write-timeout", "300ms", "--idle-timeout", "300ms"}

// The relay's server timeouts are for calls answered at once: a call the
// drain endpoint holds longer than all of them is still answered.
func TestRelayHeldCallOutlastsServerTimeouts(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	target, _ := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-release
		drained(w)
	})
	addr := runRelay(t, target.URL, serverTimeouts...)
	go func() {
		<-arrived
		time.Sleep(time.Second) // past every 300ms timeout of the relay's server
		close(release)
	}()
	code, result, body := hook(t, "http://"+addr+drain.Path+"?pod="+pod)
	if code != http.StatusOK || result != "drained" || body != "drained" {
		t.Errorf("held call got %d %q %q, want 200 drained", code, result, body)
	}
}

// The relay sends its pod's UID (from the downward API, the env var the
// webhook sets with a fieldRef to metadata.uid), so that the drain endpoint
// answers about this pod only, not a newer one of the same name.
func TestRelaySendsItsPodUID(t *testing.T) {
	t.Setenv("ZERODROP_POD_UID", "5a1c3e9e-0d7b-4a3b-9f1e-6c2b1d0e8f47")
	uids := make(chan string, 10)
	target, _ := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		uids <- r.URL.Query().Get("uid")
		drained(w)
	})
	addr := runRelay(t, target.URL)
	code, result, _ := hook(t, "http://"+addr+drain.Path+"?pod="+pod)
	if code != http.StatusOK || result != "drained" {
		t.Fatalf("hook got %d %q, want 200 drained", code, result)
	}
	if got := <-uids; got != "5a1c3e9e-0d7b-4a3b-9f1e-6c2b1d0e8f47" {
		t.Errorf("the drain endpoint got uid %q, want the pod's 5a1c3e9e-0d7b-4a3b-9f1e-6c2b1d0e8f47", got)
	}
}
