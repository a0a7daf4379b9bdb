package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/provider"
)

// A relay's call (with a nonce) gets every answer proven under the pod's
// token, which derives from the drain key; a call without a nonce (the
// direct hook, an old relay) is answered as before, without a proof.
func TestAnswersToARelayAreProven(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) { return draining, nil }}
	h, _, _ := gateFixture(t, time.Minute, prov, Options{Key: func() []byte { return key }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		pod    string
		code   int
		result string
	}{{"ns/web", http.StatusOK, "drained"}, {"ns/live", http.StatusNotFound, ""}} {
		resp, err := http.Get(srv.URL + Path + "?pod=" + tc.pod + "&uid=u1&" + NonceParam + "=n0nce")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tok := PodToken(key, "ns", tc.pod[len("ns/"):])
		if resp.StatusCode != tc.code || !ValidProof(resp.Header.Get(ProofHeader), tok, tc.pod, "u1", "n0nce", tc.code, tc.result) {
			t.Errorf("%s: %d %q proof %q, want %d with a valid proof", tc.pod, resp.StatusCode, resp.Header.Get(ResultHeader), resp.Header.Get(ProofHeader), tc.code)
		}
		if ValidProof(resp.Header.Get(ProofHeader), tok, tc.pod, "u1", "another nonce", tc.code, tc.result) {
			t.Errorf("%s: the proof holds for another nonce", tc.pod)
		}
	}
	resp, err := http.Get(srv.URL + Path + "?pod=ns/web")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(ResultHeader) != "drained" || resp.Header.Get(ProofHeader) != "" {
		t.Errorf("a call without a nonce got %d %q proof %q, want 200 drained without a proof", resp.StatusCode, resp.Header.Get(ResultHeader), resp.Header.Get(ProofHeader))
	}
}
