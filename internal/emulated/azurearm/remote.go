package azurearm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// The emulator over the network, for controllers in processes of their own
// (the lab SIGKILLs them): Handler serves it, Remote points an armnetwork
// client at it.

// Handler serves the emulator's API: ServeHTTP, counting, faults and
// OnWrite included.
func (e *Emulator) Handler() http.Handler { return e }

// WritesInFlight is how many PUTs and DELETEs the emulator has received and
// not yet answered: once a writer process is dead and this is 0, every
// write it sent has landed or failed.
func (e *Emulator) WritesInFlight() int64 { return e.writesInFlight.Load() }

// Remote returns a credential and client options that send an armnetwork
// client's requests to the emulator served at baseURL, with the same SDK
// retry timing as ClientOptions. For an https URL, caPEM is the certificate
// authority to trust (TLS's). The credential's token names identity, which
// the emulator records as the caller of every request.
func Remote(baseURL string, caPEM []byte, identity string) (azcore.TokenCredential, *arm.ClientOptions, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("emulator URL %q: want https://HOST:PORT", baseURL)
	}
	tr := &http.Transport{Proxy: nil}
	if u.Scheme == "https" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, nil, fmt.Errorf("emulator URL %q: no certificate authority to trust", baseURL)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return identityCredential(identity), &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{
			Cloud:     CloudConfig(u.String()),
			Transport: &http.Client{Transport: tr},
			Retry:     sdkRetry,
		},
		DisableRPRegistration: true,
	}, nil
}

// identityCredential issues a token that names an identity ("id:<name>").
type identityCredential string

func (c identityCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "id:" + string(c), ExpiresOn: time.Now().Add(24 * time.Hour)}, nil
}
