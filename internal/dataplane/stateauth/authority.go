package stateauth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/certs"
)

// Secret keys: every CA of the set, oldest first, certificates and keys in
// the same order.
const (
	caCertKey = "ca.crt"
	caKeyKey  = "ca.key"
)

// Authority is the control role's side: the private CA (kept in a Secret,
// shared by the control replicas, created by the first and rotated by any
// with optimistic concurrency), the client certificate each control replica
// presents to the replicas, and the TLS clients that accept only the
// replica they dial. It runs in every control replica (no leader needed).
type Authority struct {
	// Client reads and writes the Secret directly (not through a cache).
	Client    client.Client
	Namespace string
	// SecretName is the CA's Secret (default DefaultCASecret).
	SecretName string
	// CAValidity, LeafValidity and Overlap: see the defaults.
	CAValidity   time.Duration
	LeafValidity time.Duration
	Overlap      time.Duration
	// SyncPeriod is how often the Secret is read again (default 1 min).
	SyncPeriod time.Duration
	Now        func() time.Time
	Log        logr.Logger

	mu     sync.Mutex
	cas    []*certs.KeyPair // oldest first, all valid
	roots  *x509.CertPool
	client *tls.Certificate
}

func (a *Authority) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Authority) secretName() string {
	if a.SecretName != "" {
		return a.SecretName
	}
	return DefaultCASecret
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// NeedLeaderElection: every control replica reads replicas.
func (a *Authority) NeedLeaderElection() bool { return false }

// Start syncs the CA now and then every SyncPeriod. A failed sync is logged
// and tried again sooner; until the first succeeds no replica can be read
// (the gates wait).
func (a *Authority) Start(ctx context.Context) error {
	period := orDefault(a.SyncPeriod, time.Minute)
	for {
		wait := period
		if err := a.Sync(ctx); err != nil {
			a.Log.Error(err, "data-plane state CA not synced; trying again", "secret", a.Namespace+"/"+a.secretName())
			wait = min(period, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Sync reads the CA Secret, creates it when missing, adds a new CA when the
// newest is due for renewal, drops expired ones, and keeps the result. Every
// control replica runs it: one that loses a race to write the Secret or the
// ConfigMap (created by another first, or changed since read) reads again and
// takes what the other wrote, at once, rather than failing the sync and
// waiting for the next.
func (a *Authority) Sync(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < maxSyncAttempts; attempt++ {
		if err = a.sync(ctx); !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// maxSyncAttempts bounds Sync's reads after lost races; past it the error
// is returned and Start tries again soon.
const maxSyncAttempts = 3

func (a *Authority) sync(ctx context.Context) error {
	now := a.now()
	var s corev1.Secret
	key := client.ObjectKey{Namespace: a.Namespace, Name: a.secretName()}
	err := a.Client.Get(ctx, key, &s)
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return fmt.Errorf("read data-plane CA secret %s: %w", key, err)
	}
	var cas []*certs.KeyPair
	if !missing {
		cas, err = decodeCAs(&s, now)
		if err != nil {
			a.Log.Error(err, "data-plane CA secret unusable; starting a new CA (replicas re-request their certificates)", "secret", key.String())
			cas = nil
		}
	}
	changed := false
	if len(cas) == 0 || renewDue(cas[len(cas)-1].Cert, now) {
		ca, err := certs.NewCA("zerodrop data-plane state CA", now, orDefault(a.CAValidity, DefaultCAValidity))
		if err != nil {
			return err
		}
		cas = append(cas, ca)
		changed = true
	}
	if changed || !missing && len(cas) != countCerts(s.Data[caCertKey]) {
		if missing {
			s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.secretName()}, Type: corev1.SecretTypeOpaque}
		}
		s.Data = encodeCAs(cas)
		if missing {
			err = a.Client.Create(ctx, &s)
		} else {
			err = a.Client.Update(ctx, &s)
		}
		if err != nil {
			// Another control replica wrote first: Sync reads again.
			return fmt.Errorf("write data-plane CA secret %s: %w", key, err)
		}
		a.Log.Info("data-plane state CA written", "secret", key.String(), "cas", len(cas))
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.Cert)
	}
	a.mu.Lock()
	if !sameCAs(a.cas, cas) {
		a.client = nil // a new signing CA may apply
	}
	a.cas, a.roots = cas, pool
	a.mu.Unlock()
	return a.publish(ctx, cas)
}

// publish writes the CAs' certificates (never their keys) to the ConfigMap
// of the Secret's name, which the replicas read to renew their certificates
// early when the set changed (Replica.due): a lost CA replaced by a new one,
// a CA added for rotation or dropped as expired. It only ever makes a
// replica renew — what a replica trusts comes from its issued chain — so a
// ConfigMap written by anyone else costs requests, never trust.
func (a *Authority) publish(ctx context.Context, cas []*certs.KeyPair) error {
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, ca.CertPEM...)
	}
	key := client.ObjectKey{Namespace: a.Namespace, Name: a.secretName()}
	var cm corev1.ConfigMap
	err := a.Client.Get(ctx, key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data: map[string]string{caCertKey: string(bundle)}}
		err = a.Client.Create(ctx, &cm)
	case err != nil:
	case cm.Data[caCertKey] == string(bundle):
		return nil
	default:
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[caCertKey] = string(bundle)
		err = a.Client.Update(ctx, &cm)
	}
	if err != nil {
		// Another control replica may have written first: Sync reads
		// again.
		return fmt.Errorf("publish the data-plane CAs to ConfigMap %s (replicas renew early from it): %w", key, err)
	}
	a.Log.Info("data-plane state CAs published", "configMap", key.String(), "cas", len(cas))
	return nil
}

// renewDue reports whether less than a third of cert's validity remains.
func renewDue(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotAfter.Add(-life / 3))
}

func decodeCAs(s *corev1.Secret, now time.Time) ([]*certs.KeyPair, error) {
	cs, err := certs.ParseCertificates(s.Data[caCertKey])
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	rest := s.Data[caKeyKey]
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		keys = append(keys, pem.EncodeToMemory(b))
	}
	if len(keys) != len(cs) {
		return nil, fmt.Errorf("%d CA certificates but %d keys", len(cs), len(keys))
	}
	var out []*certs.KeyPair
	for i, c := range cs {
		kp, err := certs.ParseKeyPair(certs.EncodeCertificates([]*x509.Certificate{c}), keys[i])
		if err != nil {
			return nil, fmt.Errorf("CA %d: %w", i, err)
		}
		if !kp.Cert.IsCA || now.After(kp.Cert.NotAfter) {
			continue // expired CAs leave the set
		}
		out = append(out, kp)
	}
	return out, nil
}

func encodeCAs(cas []*certs.KeyPair) map[string][]byte {
	var c, k []byte
	for _, ca := range cas {
		c = append(c, ca.CertPEM...)
		k = append(k, ca.KeyPEM...)
	}
	return map[string][]byte{caCertKey: c, caKeyKey: k}
}

func countCerts(data []byte) int {
	cs, err := certs.ParseCertificates(data)
	if err != nil {
		return 0
	}
	return len(cs)
}

func sameCAs(a, b []*certs.KeyPair) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Cert.Raw, b[i].Cert.Raw) {
			return false
		}
	}
	return true
}

// signing is the CA that signs now: the newest one trusted for at least the
// overlap, or, when none is (a fresh install), the oldest.
func (a *Authority) signing(now time.Time) (*certs.KeyPair, []*x509.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cas) == 0 {
		return nil, nil, errors.New("data-plane state CA not read yet")
	}
	overlap := orDefault(a.Overlap, DefaultOverlap)
	signer := a.cas[0]
	for _, ca := range a.cas {
		if !now.Before(ca.Cert.NotBefore.Add(overlap)) {
			signer = ca
		}
	}
	var bundle []*x509.Certificate
	for _, ca := range a.cas {
		bundle = append(bundle, ca.Cert)
	}
	return signer, bundle, nil
}

// issue signs a leaf for pub naming uri, for usage, valid for validity (at
// most until the CA expires).
func issue(ca *certs.KeyPair, pub any, subject, uri string, usage x509.ExtKeyUsage, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: subject},
		// A peer whose clock runs a little behind still accepts it.
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		URIs:        []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

// clientCertificate is this control replica's client certificate, issued
// locally from the signing CA (its key stays in memory) and renewed when a
// third of its life is left or the CA set changed.
func (a *Authority) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	now := a.now()
	a.mu.Lock()
	c := a.client
	a.mu.Unlock()
	if c != nil && !renewDue(c.Leaf, now) {
		return c, nil
	}
	ca, _, err := a.signing(now)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf, err := issue(ca, &key.PublicKey, "zerodrop control", ControlURI, x509.ExtKeyUsageClientAuth, now, orDefault(a.LeafValidity, DefaultLeafValidity))
	if err != nil {
		return nil, err
	}
	c = &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	a.mu.Lock()
	a.client = c
	a.mu.Unlock()
	return c, nil
}

// TLSConfig is the client side of one replica's state endpoint: it presents
// the control role's certificate and accepts only a server certificate from
// the CA that names the replica whose pod has uid — a process that took the
// port, or another replica, fails the handshake.
func (a *Authority) TLSConfig(uid string) *tls.Config {
	want := ReplicaURI(types.UID(uid))
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The replica is verified below, by its pod's UID, not by a host
		// name: replicas are dialled at their pod addresses.
		InsecureSkipVerify:   true, //nolint:gosec // VerifyConnection checks the chain and the identity.
		GetClientCertificate: a.clientCertificate,
		VerifyConnection: func(cs tls.ConnectionState) error {
			a.mu.Lock()
			roots := a.roots
			a.mu.Unlock()
			if err := verifyPeer(cs.PeerCertificates, roots, x509.ExtKeyUsageServerAuth, want, a.now()); err != nil {
				return fmt.Errorf("data-plane replica not verified: %w", err)
			}
			return nil
		},
	}
}
