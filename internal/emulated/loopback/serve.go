// Package loopback serves an emulated cloud's API on HTTPS on a loopback
// port, as a client in another process reaches it: the real
// cloud-controller-managers (cloud-provider-azure through SSL_CERT_FILE,
// cloud-provider-aws through AWS_CA_BUNDLE) and a controller the lab kills.
// Only the emulators and the lab use it; the production binary links none
// of internal/emulated.
package loopback

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Served is a handler on HTTPS on a loopback port: URL is
// https://127.0.0.1:PORT, CAPEM the PEM of the authority its certificate
// chains to and CAFile where that PEM is written, for a client in another
// process.
type Served struct {
	URL    string
	CAPEM  []byte
	CAFile string
	srv    *http.Server
}

// ServeTLS serves h on a new port of 127.0.0.1 with tlsCfg (a certificate
// for loopback), after writing caPEM, the authority that certificate chains
// to, to caFile: a client started once ServeTLS returns can read it.
func ServeTLS(h http.Handler, tlsCfg *tls.Config, caPEM []byte, caFile string) (*Served, error) {
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		return nil, fmt.Errorf("emulator CA: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("emulator listener: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
	// The listener is open already: a request made before this goroutine runs
	// waits in the backlog. Serve's error after Close is ErrServerClosed.
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return &Served{URL: "https://" + ln.Addr().String(), CAPEM: caPEM, CAFile: caFile, srv: srv}, nil
}

// HTTPClient trusts the served emulator's authority only, and uses no
// proxy: a client for an SDK's HTTPClient option.
func (s *Served) HTTPClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CAPEM) {
		return nil, fmt.Errorf("emulator at %s: no certificate authority to trust", s.URL)
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// Close stops serving, closing the connections open to it.
func (s *Served) Close() error { return s.srv.Close() }
