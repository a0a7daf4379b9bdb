package stateauth_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// recoveryBound is issue 46's bound (M6): a replica whose request was lost
// or whose control role's CA changed has a certificate the control role
// accepts again within 2 minutes.
const recoveryBound = 2 * time.Minute

// logs is a logger that keeps every line (and passes it to t.Log).
type logs struct {
	mu    sync.Mutex
	lines []string
}

func newLogs(t *testing.T) (*logs, logr.Logger) {
	l := &logs{}
	return l, funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
		t.Log(prefix, args)
	}, funcr.Options{Verbosity: 1})
}

// has reports whether a line contains every one of subs.
func (l *logs) has(subs ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		return true
	}
	return false
}

// requests are the certificate requests of the replica whose pod has uid.
func (w *world) requests(t *testing.T, uid types.UID) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	var l certificatesv1.CertificateSigningRequestList
	if err := w.c.List(context.Background(), &l, client.MatchingLabels{"zerodrop.dev/pod-uid": string(uid)}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestReplicaRecoversFromDeletedRequest (issue 46, M6): a replica whose
// pending certificate request is deleted (kube-controller-manager's CSR
// cleaner deletes one left pending for a day) asks again, says so, and is
// read by the control role within the bound once a signer runs.
func TestReplicaRecoversFromDeletedRequest(t *testing.T) {
	w := startAuthority(t) // no signer yet: the request stays pending
	pod := w.pod(t, "dp-gone")
	logged, log := newLogs(t)
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, addr := w.replicaWith(t, pod, testutil.PodConfig(t, w.restCfg, pod), 0, func(r *stateauth.Replica) {
		r.Log, r.Renewals, r.Failures = log, m.StateCertRenewals, m.StateCertFailures
	})

	var gone string
	testutil.Eventually(t, 60*time.Second, "the replica's pending request", func() (bool, string) {
		reqs := w.requests(t, pod.UID)
		if len(reqs) != 1 {
			return false, "no request yet"
		}
		gone = reqs[0].Name
		return true, ""
	})
	csr := &certificatesv1.CertificateSigningRequest{}
	csr.Name = gone
	if err := w.c.Delete(context.Background(), csr); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	w.startSigner(t)

	ok := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: w.auth.TLSConfig(string(pod.UID))}}
	testutil.Eventually(t, recoveryBound, "the control role to read the replica after its request was deleted", func() (bool, string) {
		body, err := get(ok, addr)
		if err != nil {
			return false, err.Error()
		}
		return body == "[]", body
	})
	t.Logf("read %s after the request was deleted", time.Since(deleted).Round(time.Millisecond))
	if !rep.Ready() {
		t.Fatal("read, yet the replica says it has no certificate")
	}
	if !logged.has("request gone", gone) {
		t.Errorf("no log line says request %s was gone", gone)
	}
	if n := promtestutil.ToFloat64(m.StateCertRenewals.WithLabelValues(stateauth.RenewCSRGone)); n != 1 {
		t.Errorf("zerodrop_state_certificate_renewals_total{reason=%q} = %v, want 1", stateauth.RenewCSRGone, n)
	}
}

// TestReplicaRenewsWhenCAChanges (issue 46, M6): when the control role's CA
// is lost and replaced by a new one, the replica notices, says so, and has
// a certificate of the new CA that the control role (trusting only the new
// CA) reads within the bound — not at its normal renewal, hours later.
func TestReplicaRenewsWhenCAChanges(t *testing.T) {
	w := start(t)
	pod := w.pod(t, "dp-ca")
	logged, log := newLogs(t)
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The check runs every 2 s here (30 s by default, within the bound
	// with the control role's 1 min sync).
	_, addr := w.replicaWith(t, pod, testutil.PodConfig(t, w.restCfg, pod), 0, func(r *stateauth.Replica) {
		r.Log, r.Renewals, r.Failures, r.CheckPeriod = log, m.StateCertRenewals, m.StateCertFailures, 2*time.Second
	})
	ok := func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: w.auth.TLSConfig(string(pod.UID))}}
	}
	testutil.Eventually(t, 60*time.Second, "the control role to read the replica", func() (bool, string) {
		body, err := get(ok(), addr)
		if err != nil {
			return false, err.Error()
		}
		return body == "[]", body
	})

	// The CA is lost: the control role's next sync starts a new one.
	ctx := context.Background()
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = ns, stateauth.DefaultCASecret
	if err := w.c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := w.auth.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	if err := w.c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	cas, err := certs.ParseCertificates(secret.Data["ca.crt"])
	if err != nil || len(cas) != 1 {
		t.Fatalf("the new CA secret: %d CAs, %v", len(cas), err)
	}
	newCA := cas[0]

	var leaf *x509.Certificate
	testutil.Eventually(t, recoveryBound, "the control role to read the replica with the new CA", func() (bool, string) {
		resp, err := ok().Get("https://" + addr + dataplane.BackendsPath + "?key=x")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		leaf = resp.TLS.PeerCertificates[0]
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	t.Logf("read with the new CA %s after it replaced the old", time.Since(changed).Round(time.Millisecond))
	if err := leaf.CheckSignatureFrom(newCA); err != nil {
		t.Fatalf("the replica's certificate is not the new CA's: %v", err)
	}
	if !logged.has("CAs changed") {
		t.Error("no log line says the control role's CAs changed")
	}
	if n := promtestutil.ToFloat64(m.StateCertRenewals.WithLabelValues(stateauth.RenewCAChanged)); n < 1 {
		t.Errorf("zerodrop_state_certificate_renewals_total{reason=%q} = %v, want at least 1", stateauth.RenewCAChanged, n)
	}
}
