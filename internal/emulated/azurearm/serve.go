package azurearm

import "zerodrop.dev/zerodrop/internal/emulated/loopback"

// Served is an emulator on HTTPS on a loopback port, as a client in
// another process (the real cloud-controller-manager, a controller the lab
// kills) reaches it: URL is https://127.0.0.1:PORT and CAFile the
// authority its certificate chains to (SSL_CERT_FILE for the CCM, Remote's
// caPEM for zerodrop).
type Served = loopback.Served

// ServeTLS serves e's Handler on a new loopback port with a certificate of
// its own (NewTLS), and writes the authority's PEM to caFile.
func (e *Emulator) ServeTLS(caFile string) (*Served, error) {
	tlsCfg, caPEM, err := NewTLS()
	if err != nil {
		return nil, err
	}
	return loopback.ServeTLS(e.Handler(), tlsCfg, caPEM, caFile)
}
