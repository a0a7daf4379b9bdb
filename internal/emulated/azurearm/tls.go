package azurearm

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"

	"zerodrop.dev/zerodrop/internal/certs"
)

// ARM is served over HTTPS only, and azcore refuses to send a bearer token
// over plain HTTP, so a real client needs the emulator on TLS: NewTLS makes
// a certificate authority of its own and a server certificate for loopback.
// A client trusts caPEM (Remote; cloud-provider-azure through SSL_CERT_FILE,
// which Go's x509 reads on Linux).

// NewTLS returns a server configuration for 127.0.0.1, ::1 and localhost,
// and the PEM of the authority that signed it (issued as the webhook's are,
// internal/certs).
func NewTLS() (*tls.Config, []byte, error) {
	now, validity := time.Now(), 7*24*time.Hour
	ca, err := certs.NewCA("zerodrop ARM emulator CA", now, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("emulator CA: %w", err)
	}
	leaf, err := certs.NewServing(ca, []string{"localhost", "127.0.0.1", "::1"}, now, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("emulator certificate: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw, ca.Cert.Raw}, PrivateKey: leaf.Key}},
	}
	return cfg, ca.CertPEM, nil
}

// CloudConfig is the cloud whose Resource Manager is the emulator at
// baseURL, with the public cloud's token audience.
func CloudConfig(baseURL string) cloud.Configuration {
	return cloud.Configuration{
		ActiveDirectoryAuthorityHost: strings.TrimSuffix(baseURL, "/") + "/",
		Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: strings.TrimSuffix(baseURL, "/"), Audience: audience},
		},
	}
}
