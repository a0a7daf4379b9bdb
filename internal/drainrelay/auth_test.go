package drainrelay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// testKey is the drain key of these tests; token is pod's token under it.
var (
	testKey = []byte("0123456789abcdef0123456789abcdef")
	token   = drain.PodToken(testKey, "shop", "web-1")
)

// proven answers as the drain endpoint does for a relay: with the result,
// and the proof under token of the call's nonce (tok "" : no proof, as an
// impostor).
func proven(w http.ResponseWriter, r *http.Request, tok string, code int, result string) {
	if result != "" {
		w.Header().Set(drain.ResultHeader, result)
	}
	if tok != "" {
		q := r.URL.Query()
		w.Header().Set(drain.ProofHeader, drain.Proof(tok, q.Get("pod"), q.Get("uid"), q.Get(drain.NonceParam), code, result))
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, result)
}

func tokenRelay(t *testing.T, target string, maxWait time.Duration) *httptest.Server {
	t.Helper()
	h, err := NewHandler(Options{Target: target, Pod: pod, Token: token, MaxWait: maxWait, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hookWith calls the relay as the kubelet does, with header tok ("" : none).
func hookWith(ctx context.Context, url, tok string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	if tok != "" {
		req.Header.Set(TokenHeader, tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(drain.ResultHeader), strings.TrimSpace(string(b)), nil
}

// Another pod calls the relay before the pod terminates (the drain
// endpoint would refuse it): without the pod's token it is refused at once
// and makes no drain call, so the kubelet's own call, later, is not joined
// to a refusal and gets the drain endpoint's answer.
func TestRelayRefusesCallsWithoutThePodsToken(t *testing.T) {
	var terminating atomic.Bool
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if !terminating.Load() {
			proven(w, r, token, http.StatusNotFound, "refused")
			return
		}
		proven(w, r, token, http.StatusOK, "drained")
	})
	r := tokenRelay(t, target.URL, time.Minute)
	for _, tok := range []string{"", "wrong", token[:len(token)-1]} {
		code, _, _, err := hookWith(context.Background(), r.URL+drain.Path+"?pod="+pod, tok)
		if err != nil || code != http.StatusForbidden {
			t.Fatalf("a call with token %q got %d (%v), want 403", tok, code, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("calls without the token made %d drain calls, want none", n)
	}
	terminating.Store(true)
	code, result, _, err := hookWith(context.Background(), r.URL+drain.Path+"?pod="+pod, token)
	if err != nil || code != http.StatusOK || result != "drained" {
		t.Fatalf("the kubelet's call got %d %q (%v), want 200 drained", code, result, err)
	}
}

// An impostor on the drain address (CVE-2020-8554: a Service whose
// externalIPs hold it) answers "drained" at once, without a proof or with
// one under another key: the relay never passes it on, calls again until
// its deadline, and then answers the timeout, as when nothing answers.
func TestRelayRejectsAnImpostorsAnswers(t *testing.T) {
	other := drain.PodToken([]byte("another key, 32 bytes long......"), "shop", "web-1")
	for _, tc := range []struct{ name, tok string }{{"no proof", ""}, {"another key", other}} {
		t.Run(tc.name, func(t *testing.T) {
			target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
				proven(w, r, tc.tok, http.StatusOK, "drained")
			})
			start := time.Now()
			code, result, body, err := hookWith(context.Background(), tokenRelay(t, target.URL, 2*time.Second).URL+drain.Path+"?pod="+pod, token)
			if err != nil || code != http.StatusGatewayTimeout || result != "timeout" {
				t.Fatalf("the hook got %d %q %q (%v) from an impostor, want 504 timeout", code, result, body, err)
			}
			if waited := time.Since(start); waited < 2*time.Second {
				t.Errorf("answered after %s, before the relay's deadline (2s)", waited)
			}
			if n := calls.Load(); n < 2 {
				t.Errorf("%d call(s) to the impostor, want the unproven answer called again", n)
			}
		})
	}
	// The real endpoint's proof is accepted.
	target, _ := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { proven(w, r, token, http.StatusOK, "drained") })
	code, result, _, err := hookWith(context.Background(), tokenRelay(t, target.URL, time.Minute).URL+drain.Path+"?pod="+pod, token)
	if err != nil || code != http.StatusOK || result != "drained" {
		t.Fatalf("a proven answer got %d %q (%v), want 200 drained", code, result, err)
	}
}

// The kubelet calls the hook of each container; every authenticated caller
// joins one drain call, and the first caller going away does not cut it for
// the others.
func TestRelayCallersShareOneDrainCall(t *testing.T) {
	const k = 3
	release := make(chan struct{})
	target, calls := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		proven(w, r, token, http.StatusOK, "drained")
	})
	h, err := NewHandler(Options{Target: target.URL, Pod: pod, Token: token, MaxWait: time.Minute, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url := srv.URL + drain.Path + "?pod=" + pod
	firstCtx, leave := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, _, _, err := hookWith(firstCtx, url, token); first <- err }()
	type answer struct {
		code   int
		result string
		err    error
	}
	answers := make(chan answer, k-1)
	testutil.Eventually(t, 20*time.Second, "the first caller's drain call", func() (bool, string) {
		return calls.Load() == 1, ""
	})
	for i := 1; i < k; i++ {
		go func() { c, r, _, err := hookWith(context.Background(), url, token); answers <- answer{c, r, err} }()
	}
	testutil.Eventually(t, 20*time.Second, "every caller joined", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.flight != nil && h.flight.callers == k, ""
	})
	leave()
	<-first
	close(release)
	for i := 1; i < k; i++ {
		if a := <-answers; a.err != nil || a.code != http.StatusOK || a.result != "drained" {
			t.Fatalf("a joined caller got %d %q (%v) after the first left, want 200 drained", a.code, a.result, a.err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d callers made %d drain calls, want 1", k, n)
	}
}
