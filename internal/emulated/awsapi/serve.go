package awsapi

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// Served is the emulator on HTTPS on a loopback port, as a client in
// another process (the real cloud-controller-manager, through
// [ServiceOverride] URLs) reaches it: URL is https://127.0.0.1:PORT, one
// endpoint for both APIs, and CAFile the authority its certificate chains
// to (AWS_CA_BUNDLE or SSL_CERT_FILE for the CCM).
type Served struct {
	URL    string
	CAPEM  []byte
	CAFile string
	srv    *http.Server
}

// ServeTLS serves e on a new loopback port with a certificate of its own
// (the ARM emulator's loopback authority, azurearm.NewTLS), and writes
// the authority's PEM to caFile.
func (e *Emulator) ServeTLS(caFile string) (*Served, error) {
	tlsCfg, caPEM, err := azurearm.NewTLS()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		return nil, fmt.Errorf("emulator CA: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("emulator listener: %w", err)
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
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
