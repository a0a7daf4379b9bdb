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
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/certs"
)

// Replica is a data-plane replica's side: it generates a key in memory,
// asks for a certificate naming its pod through the CSR API, serves with it
// and renews it when a third of its life is left, when its request is gone
// before being issued, or when the control role's CAs changed. Until it has
// one its state endpoint completes no handshake; while a renewal is under
// way it keeps serving with the certificate it has.
type Replica struct {
	// Client creates the requests; Reader reads them (and the published
	// CAs) back directly.
	Client client.Client
	Reader client.Reader
	// The replica's pod (the downward API).
	PodNamespace, PodName string
	PodUID                types.UID
	// CAConfigMap names the ConfigMap in PodNamespace where the control role
	// publishes its CAs (Authority; default DefaultCASecret, the name of
	// the CA's Secret).
	CAConfigMap string
	// Validity is the lifetime asked for (default DefaultLeafValidity; the
	// API's minimum is 10 minutes).
	Validity time.Duration
	// Poll is how often a pending request is read again (default 1 s).
	Poll time.Duration
	// CheckPeriod is how often the published CAs are compared with the
	// certificate's (default DefaultCACheckPeriod).
	CheckPeriod time.Duration
	// Renewals counts the requests made, by reason (RenewInitial, ...);
	// Failures the failed steps, by stage. Nil: not counted.
	Renewals, Failures *prometheus.CounterVec
	Now                func() time.Time
	Log                logr.Logger

	cur atomic.Pointer[issued]
	// caAttempts early renewals were made for CAs that still differ; the
	// next is not before caNext (Start's goroutine only).
	caAttempts int
	caNext     time.Time
}

// Why a replica requests a certificate (label reason of Renewals).
const (
	RenewInitial   = "initial"
	RenewExpiring  = "expiring"
	RenewCSRGone   = "csr_gone"
	RenewCAChanged = "ca_changed"
)

// Where obtaining or checking a certificate failed (label stage of
// Failures).
const (
	FailCreate  = "create"  // the request could not be created
	FailRead    = "read"    // a pending request could not be read
	FailDenied  = "denied"  // the request was denied or failed
	FailInvalid = "invalid" // the issued certificate is unusable
	FailCACheck = "ca_read" // the published CAs could not be read
)

// DefaultCACheckPeriod: with the control role's CA sync (1 min) it bounds
// how long a replica serves a certificate of a CA the control role no
// longer trusts: under 2 minutes from the new CA's Secret to the renewal.
const DefaultCACheckPeriod = 30 * time.Second

// issued is a certificate in use with the CAs its clients must come from.
type issued struct {
	cert    tls.Certificate
	clients *x509.CertPool
	cas     []*x509.Certificate
}

// stageError is a failure with its stage (label of Failures).
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func failed(stage string, err error) error { return &stageError{stage: stage, err: err} }

func (r *Replica) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func count(c *prometheus.CounterVec, label string) {
	if c != nil {
		c.WithLabelValues(label).Inc()
	}
}

// NeedLeaderElection: every replica serves its own state.
func (r *Replica) NeedLeaderElection() bool { return false }

// Start obtains a certificate and keeps it renewed until ctx ends. Failures
// are logged (each one, with its error), counted and retried with
// back-off; a certificate in use keeps serving until it expires.
func (r *Replica) Start(ctx context.Context) error {
	failures := 0
	reason := RenewInitial
	for {
		if reason != "" {
			err := r.obtain(ctx, reason)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				failures++
				backoff := min(time.Second<<min(failures-1, 6), time.Minute)
				stage := FailCreate
				var se *stageError
				if errors.As(err, &se) {
					stage = se.stage
				}
				count(r.Failures, stage)
				r.Log.Error(err, "no new state endpoint certificate; retrying (a certificate in use keeps serving until it expires; without one the control role cannot read this replica)",
					"reason", reason, "failures", failures, "retryIn", backoff, "serving", r.Ready())
				if !sleep(ctx, backoff) {
					return nil
				}
				continue
			}
			failures = 0
		}
		if !sleep(ctx, r.untilCheck()) {
			return nil
		}
		reason = r.due(ctx)
	}
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// untilCheck is the time to the next check: the check period, or the
// renewal time when sooner.
func (r *Replica) untilCheck() time.Duration {
	wait := orDefault(r.CheckPeriod, DefaultCACheckPeriod)
	if cur := r.cur.Load(); cur != nil {
		if d := renewAt(cur.cert.Leaf).Sub(r.now()); d < wait {
			wait = max(d, 0)
		}
	}
	return wait
}

// renewAt is when a third of leaf's life is left.
func renewAt(leaf *x509.Certificate) time.Time {
	return leaf.NotAfter.Add(-leaf.NotAfter.Sub(leaf.NotBefore) / 3)
}

// due is why a certificate must be requested now ("" when it need not).
func (r *Replica) due(ctx context.Context) string {
	cur := r.cur.Load()
	if cur == nil {
		return RenewInitial
	}
	now := r.now()
	if !now.Before(renewAt(cur.cert.Leaf)) {
		return RenewExpiring
	}
	published, err := r.publishedCAs(ctx)
	if err != nil {
		count(r.Failures, FailCACheck)
		r.Log.Error(err, "cannot tell whether the control role's CAs changed; keeping the state endpoint certificate")
		return ""
	}
	if published == nil || sameCerts(published, cur.cas) {
		r.caAttempts = 0
		return ""
	}
	if now.Before(r.caNext) {
		return "" // renewed for these CAs already; the signer may lag
	}
	// A published set that never matches (the signer's lags, or one
	// written by someone else) costs a request at growing intervals,
	// not one per check.
	r.caNext = now.Add(min(orDefault(r.CheckPeriod, DefaultCACheckPeriod)<<min(r.caAttempts, 7), time.Hour))
	r.caAttempts++
	r.Log.Info("the control role's CAs changed; renewing the state endpoint certificate early (the control role may refuse the current one)",
		"issuer", cur.cert.Leaf.Issuer.String(), "publishedCAs", len(published), "certificateCAs", len(cur.cas), "attempt", r.caAttempts)
	return RenewCAChanged
}

// publishedCAs are the CAs the control role published (nil when it has
// published none: an older control role; the certificate is then renewed
// only as it expires). They only ever cause a renewal: which CAs the
// replica trusts comes from its issued chain, signed by the control role.
func (r *Replica) publishedCAs(ctx context.Context) ([]*x509.Certificate, error) {
	name := r.CAConfigMap
	if name == "" {
		name = DefaultCASecret
	}
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: r.PodNamespace, Name: name}
	if err := r.Reader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			r.Log.V(1).Info("the control role publishes no CAs; renewing only as the certificate expires", "configMap", key.String())
			return nil, nil
		}
		return nil, fmt.Errorf("read the control role's CAs (ConfigMap %s): %w", key, err)
	}
	cas, err := certs.ParseCertificates([]byte(cm.Data[caCertKey]))
	if err != nil {
		return nil, fmt.Errorf("the control role's CAs (ConfigMap %s, key %s): %w", key, caCertKey, err)
	}
	if len(cas) == 0 {
		return nil, fmt.Errorf("the control role's CAs (ConfigMap %s, key %s): no certificate", key, caCertKey)
	}
	return cas, nil
}

// sameCerts reports whether a and b hold the same certificates, in any
// order.
func sameCerts(a, b []*x509.Certificate) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y *x509.Certificate) bool { return x.Equal(y) }) {
			return false
		}
	}
	return true
}

// obtain requests a certificate for a new key and waits until it is issued
// or denied. A request deleted before it was issued (kube-controller-
// manager's CSR cleaner, pkg/controller/certificates/cleaner: pending ones
// after 24 h, denied and issued ones after 1 h, checked hourly; or anyone
// who may delete CSRs) is made again for the same key.
func (r *Replica) obtain(ctx context.Context, reason string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csr, err := r.request(ctx, key, reason)
	if err != nil {
		return err
	}
	log := r.Log.WithValues("csr", csr.Name)
	poll := orDefault(r.Poll, time.Second)
	wait, readFailures := poll, 0
	waitingSince := r.now()
	for {
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		err := r.Reader.Get(ctx, client.ObjectKeyFromObject(csr), csr)
		switch {
		case apierrors.IsNotFound(err):
			log.Info("state endpoint certificate request gone before it was issued (deleted, e.g. by kube-controller-manager's CSR cleaner); requesting again", "reason", reason)
			if csr, err = r.request(ctx, key, RenewCSRGone); err != nil {
				return err
			}
			log = r.Log.WithValues("csr", csr.Name)
			wait, readFailures = poll, 0
			waitingSince = r.now()
			continue
		case err != nil:
			readFailures++
			wait = min(poll<<min(readFailures, 5), 30*time.Second)
			count(r.Failures, FailRead)
			log.Error(err, "reading the state endpoint certificate request; trying again", "failures", readFailures, "retryIn", wait)
			continue
		}
		wait, readFailures = poll, 0
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return failed(FailDenied, fmt.Errorf("certificate request %s %s: %s", csr.Name, c.Type, c.Message))
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
		return failed(FailInvalid, fmt.Errorf("certificate request %s: %w", csr.Name, err))
	}
	leaf := chain[0]
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return failed(FailInvalid, fmt.Errorf("certificate request %s: the issued certificate is not for this replica's key", csr.Name))
	}
	pool := x509.NewCertPool()
	for _, ca := range chain[1:] {
		pool.AddCert(ca)
	}
	r.cur.Store(&issued{cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, clients: pool, cas: chain[1:]})
	log.Info("state endpoint certificate issued", "reason", reason, "issuer", leaf.Issuer.String(), "notAfter", leaf.NotAfter)
	return nil
}

// request creates a certificate request for key naming the replica's pod.
func (r *Replica) request(ctx context.Context, key *ecdsa.PrivateKey, reason string) (*certificatesv1.CertificateSigningRequest, error) {
	uri, err := url.Parse(ReplicaURI(r.PodUID))
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: r.PodNamespace + "/" + r.PodName}, URIs: []*url.URL{uri}}, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	secs := int32(orDefault(r.Validity, DefaultLeafValidity) / time.Second)
	// A new name each time (GenerateName): a deleted request's name may
	// still be taken by an object being deleted.
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
		return nil, failed(FailCreate, fmt.Errorf("create certificate request: %w", err))
	}
	count(r.Renewals, reason)
	r.Log.Info("state endpoint certificate requested", "csr", csr.Name, "reason", reason)
	return csr, nil
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
