package stateauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/certs"
)

// Replica is a data-plane replica's side: it generates a key in memory,
// asks for a certificate naming its pod through the CSR API, serves with it
// and renews it when a third of its life is left. Until it has one its
// state endpoint completes no handshake.
type Replica struct {
	// Client creates the requests; Reader reads them back directly.
	Client client.Client
	Reader client.Reader
	// The replica's pod (the downward API).
	PodNamespace, PodName string
	PodUID                types.UID
	// Validity is the lifetime asked for (default DefaultLeafValidity; the
	// API's minimum is 10 minutes).
	Validity time.Duration
	// Poll is how often a pending request is read again (default 1 s).
	Poll time.Duration
	Now  func() time.Time
	Log  logr.Logger

	cur atomic.Pointer[issued]
}

// issued is a certificate in use with the CAs its clients must come from.
type issued struct {
	cert    tls.Certificate
	clients *x509.CertPool
}

func (r *Replica) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// NeedLeaderElection: every replica serves its own state.
func (r *Replica) NeedLeaderElection() bool { return false }

// Start obtains a certificate and keeps it renewed until ctx ends. Failures
// are logged and retried with back-off; a certificate in use keeps serving
// until it expires.
func (r *Replica) Start(ctx context.Context) error {
	backoff := time.Second
	for {
		wait := time.Duration(0)
		if cur := r.cur.Load(); cur != nil {
			leaf := cur.cert.Leaf
			life := leaf.NotAfter.Sub(leaf.NotBefore)
			wait = leaf.NotAfter.Add(-life / 3).Sub(r.now())
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		if err := r.obtain(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.Log.Error(err, "no state endpoint certificate; the control role cannot read this replica until one is issued", "retryIn", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
	}
}

// obtain requests a certificate for a new key and waits until it is issued
// or denied.
func (r *Replica) obtain(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	uri, err := url.Parse(ReplicaURI(r.PodUID))
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: r.PodNamespace + "/" + r.PodName}, URIs: []*url.URL{uri}}, key)
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	secs := int32(orDefault(r.Validity, DefaultLeafValidity) / time.Second)
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "zerodrop-state-" + truncate(r.PodName, 40) + "-",
			Labels: map[string]string{"zerodrop.dev/pod-uid": string(r.PodUID)}},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        SignerName,
			ExpirationSeconds: &secs,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	if err := r.Client.Create(ctx, csr); err != nil {
		return fmt.Errorf("create certificate request: %w", err)
	}
	log := r.Log.WithValues("csr", csr.Name)
	log.Info("state endpoint certificate requested")
	poll := orDefault(r.Poll, time.Second)
	waitingSince := r.now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(csr), csr); err != nil {
			log.V(1).Info("reading the certificate request", "err", err.Error())
			continue
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return fmt.Errorf("certificate request %s %s: %s", csr.Name, c.Type, c.Message)
			}
		}
		if len(csr.Status.Certificate) > 0 {
			break
		}
		if r.now().Sub(waitingSince) > time.Minute {
			log.Info("still waiting for the control role to sign the state endpoint certificate")
			waitingSince = r.now()
		}
	}
	chain, err := certs.ParseCertificates(csr.Status.Certificate)
	if err != nil {
		return fmt.Errorf("certificate request %s: %w", csr.Name, err)
	}
	leaf := chain[0]
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return fmt.Errorf("certificate request %s: the issued certificate is not for this replica's key", csr.Name)
	}
	pool := x509.NewCertPool()
	for _, ca := range chain[1:] {
		pool.AddCert(ca)
	}
	r.cur.Store(&issued{cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, clients: pool})
	log.Info("state endpoint certificate issued", "notAfter", leaf.NotAfter)
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TLSConfig is the state endpoint's: the replica's certificate, and only
// the control role's client certificate accepted. Before a certificate is
// issued every handshake fails.
func (r *Replica) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cur := r.cur.Load()
			if cur == nil {
				return nil, errNoCertificate
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{cur.cert},
				ClientAuth:   tls.RequireAnyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return verifyPeer(cs.PeerCertificates, cur.clients, x509.ExtKeyUsageClientAuth, ControlURI, r.now())
				},
			}, nil
		},
	}
}

// Ready reports whether the replica has a certificate.
func (r *Replica) Ready() bool { return r.cur.Load() != nil }
