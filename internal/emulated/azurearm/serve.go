package azurearm

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Served is an emulator on HTTPS on a loopback port, as a client in
// another process (the real cloud-controller-manager, a controller the lab
// kills) reaches it: URL is https://127.0.0.1:PORT and CAFile the
// authority its certificate chains to (SSL_CERT_FILE for the CCM, Remote's
// caPEM for zerodrop).
type Served struct {
	URL    string
	CAPEM  []byte
	CAFile string
	srv    *http.Server
}

// ServeTLS serves e's Handler on a new loopback port with a certificate of
// its own (NewTLS), and writes the authority's PEM to caFile.
func (e *Emulator) ServeTLS(caFile string) (*Served, error) {
	tlsCfg, caPEM, err := NewTLS()
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
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return &Served{URL: "https://" + ln.Addr().String(), CAPEM: caPEM, CAFile: caFile, srv: srv}, nil
}

// Close stops serving, closing the connections open to it.
func (s *Served) Close() error { return s.srv.Close() }
