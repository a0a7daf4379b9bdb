package awsapi

import (
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/loopback"
)

// Served is the emulator on HTTPS on a loopback port, as a client in
// another process (the real cloud-controller-manager, through
// [ServiceOverride] URLs) reaches it: URL is https://127.0.0.1:PORT, one
// endpoint for both APIs, and CAFile the authority its certificate chains
// to (AWS_CA_BUNDLE or SSL_CERT_FILE for the CCM). Its HTTPClient trusts
// that authority only.
type Served = loopback.Served

// ServeTLS serves e on a new loopback port with a certificate of its own
// (the ARM emulator's loopback authority, azurearm.NewTLS), and writes
// the authority's PEM to caFile.
func (e *Emulator) ServeTLS(caFile string) (*Served, error) {
	tlsCfg, caPEM, err := azurearm.NewTLS()
	if err != nil {
		return nil, err
	}
	return loopback.ServeTLS(e, tlsCfg, caPEM, caFile)
}
