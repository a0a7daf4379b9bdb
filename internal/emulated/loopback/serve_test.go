package loopback_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/emulated/loopback"
)

// newTLS issues an authority and a loopback certificate it signs.
func newTLS(t *testing.T, name string) (*tls.Config, []byte) {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA(name, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := certs.NewServing(ca, []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw, ca.Cert.Raw}, PrivateKey: leaf.Key}}}, ca.CertPEM
}

// TestServeTLS: the handler answers on loopback over TLS, to a client that
// trusts the written authority and no other; a client trusting another
// authority is refused, and after Close nothing answers.
func TestServeTLS(t *testing.T) {
	cfg, caPEM := newTLS(t, "served CA")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	s, err := loopback.ServeTLS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello "+r.URL.Path)
	}), cfg, caPEM, caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if !strings.HasPrefix(s.URL, "https://127.0.0.1:") || s.CAFile != caFile {
		t.Errorf("served at %q with CA file %q; want https://127.0.0.1:PORT and %q", s.URL, s.CAFile, caFile)
	}
	if written, err := os.ReadFile(caFile); err != nil || !bytes.Equal(written, caPEM) {
		t.Errorf("CA file: %v, %d bytes; want the authority's PEM (%d bytes)", err, len(written), len(caPEM))
	}

	hc, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(s.URL + "/x")
	if err != nil {
		t.Fatalf("GET with the served authority: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "hello /x" {
		t.Errorf("GET /x: %q; want the handler's answer", body)
	}

	_, otherPEM := newTLS(t, "other CA")
	other, err := (&loopback.Served{URL: s.URL, CAPEM: otherPEM}).HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := other.Get(s.URL + "/x"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("GET trusting another authority: %s; want a certificate error", resp.Status)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if resp, err := hc.Get(s.URL + "/x"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("GET after Close: %s; want no answer", resp.Status)
	}
}

// TestHTTPClientNeedsAuthority: with no PEM to trust there is no client
// (one with an empty pool would fail every request later, less clearly).
func TestHTTPClientNeedsAuthority(t *testing.T) {
	if _, err := (&loopback.Served{URL: "https://127.0.0.1:1"}).HTTPClient(); err == nil {
		t.Error("HTTPClient with no authority: no error")
	}
}
