package stateauth_test

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
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const (
	ns = "kube-system"
	sa = "zerodrop-data-plane"
)

var selector = labels.SelectorFromSet(labels.Set{"app": "dp"})

// world is a control role's authority and signer on the real API server.
type world struct {
	restCfg *rest.Config
	c       client.Client
	auth    *stateauth.Authority
}

func start(t *testing.T) *world {
	t.Helper()
	w := startAuthority(t)
	w.startSigner(t)
	return w
}

// startAuthority is the control role without its signer: requests stay
// pending until startSigner.
func startAuthority(t *testing.T) *world {
	t.Helper()
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	testutil.AdminServiceAccount(t, restCfg, ns, sa)
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{restCfg: restCfg, c: c, auth: &stateauth.Authority{Client: c, Namespace: ns, Log: testr.New(t)}}
	if err := mgr.Add(w.auth); err != nil {
		t.Fatal(err)
	}
	runManager(t, mgr)
	return w
}

// startSigner runs the signer of w's authority in a manager of its own.
func (w *world) startSigner(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(w.restCfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	signer := &stateauth.Signer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Authority: w.auth,
		Namespace: ns, Selector: selector, Log: testr.New(t)}
	if err := signer.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(t, mgr)
}

func runManager(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })
}

func (w *world) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "dp"}},
		Spec: corev1.PodSpec{NodeName: "node-" + name, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "controller", Image: "zerodrop"}}},
	}
	if err := w.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// replica starts the replica side of pod, authenticated with cfg, and
// serves its state endpoint on a loopback port.
func (w *world) replica(t *testing.T, pod *corev1.Pod, cfg *rest.Config, idle time.Duration) (*stateauth.Replica, string) {
	t.Helper()
	return w.replicaWith(t, pod, cfg, idle, nil)
}

// replicaWith is replica with the Replica's fields changed by set first.
func (w *world) replicaWith(t *testing.T, pod *corev1.Pod, cfg *rest.Config, idle time.Duration, set func(*stateauth.Replica)) (*stateauth.Replica, string) {
	t.Helper()
	rc, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep := &stateauth.Replica{Client: rc, Reader: rc, PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: pod.UID,
		Poll: 200 * time.Millisecond, Log: testr.New(t)}
	if set != nil {
		set(rep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = rep.Start(ctx) }()
	bound := make(chan net.Addr, 1)
	srv := &dataplane.Server{Addr: "127.0.0.1:0", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("[]"))
	}), TLS: rep.TLSConfig(), IdleTimeout: idle, Log: testr.New(t), Bound: func(a net.Addr) { bound <- a }}
	go func() { _ = srv.Start(ctx) }()
	return rep, (<-bound).String()
}

func get(c *http.Client, addr string) (string, error) {
	resp, err := c.Get("https://" + addr + dataplane.BackendsPath + "?key=x")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestReplicaCertificate (issue 28): a replica whose request is made with a
// token bound to its own pod gets a certificate naming the pod, and the
// control role reads it — only when it dials that pod's UID. Without the
// control role's client certificate nothing is answered.
func TestReplicaCertificate(t *testing.T) {
	w := start(t)
	pod := w.pod(t, "dp-a")
	other := w.pod(t, "dp-b")
	rep, addr := w.replica(t, pod, testutil.PodConfig(t, w.restCfg, pod), 0)
	testutil.Eventually(t, 60*time.Second, "the replica's certificate", func() (bool, string) { return rep.Ready(), "" })

	ok := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: w.auth.TLSConfig(string(pod.UID))}}
	testutil.Eventually(t, 30*time.Second, "the control role to read the replica", func() (bool, string) {
		body, err := get(ok, addr)
		if err != nil {
			return false, err.Error()
		}
		return body == "[]", body
	})
	// Dialled as another replica (a replica answering at a stale address):
	// refused.
	wrong := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: w.auth.TLSConfig(string(other.UID))}}
	if body, err := get(wrong, addr); err == nil {
		t.Fatalf("a client expecting pod %s read pod %s's endpoint: %q", other.Name, pod.Name, body)
	}
	// No client certificate, or one of another CA: no answer.
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test is the attacker
	if body, err := get(anon, addr); err == nil {
		t.Fatalf("a client without a certificate read the endpoint: %q", body)
	}
	foreign := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{selfSigned(t, stateauth.ControlURI)}}}} //nolint:gosec
	if body, err := get(foreign, addr); err == nil {
		t.Fatalf("a client with a self-signed control certificate read the endpoint: %q", body)
	}
}

// selfSigned is a client certificate of a CA of its own naming uri.
func selfSigned(t *testing.T, uri string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(uri)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "impostor"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestSignerDenies (issue 28): requests that do not come from inside the
// pod they name are denied — an administrator's, the pod's ServiceAccount
// with a token not bound to the pod, another pod's token — and a request
// naming a pod that is not a data-plane replica.
func TestSignerDenies(t *testing.T) {
	w := start(t)
	pod := w.pod(t, "dp-c")
	sibling := w.pod(t, "dp-d")

	unbound := rest.AnonymousClientConfig(w.restCfg)
	unbound.BearerToken = serviceAccountToken(t, w.restCfg)
	cases := []struct {
		name string
		cfg  *rest.Config
		uid  string
	}{
		{"administrator", w.restCfg, string(pod.UID)},
		{"the ServiceAccount, token not bound to the pod", unbound, string(pod.UID)},
		{"another replica's pod", testutil.PodConfig(t, w.restCfg, sibling), string(pod.UID)},
		{"no such pod", testutil.PodConfig(t, w.restCfg, pod), "00000000-0000-0000-0000-000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(tc.cfg, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			csr := request(t, tc.uid)
			if err := c.Create(context.Background(), csr); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, "the request decided", func() (bool, string) {
				if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(csr), csr); err != nil {
					return false, err.Error()
				}
				if len(csr.Status.Certificate) > 0 {
					t.Fatalf("certificate issued to %s", tc.name)
				}
				for _, cond := range csr.Status.Conditions {
					if cond.Type == certificatesv1.CertificateDenied {
						t.Logf("denied: %s", cond.Message)
						return true, ""
					}
				}
				return false, fmt.Sprintf("%+v", csr.Status.Conditions)
			})
		})
	}
}

// serviceAccountToken is a token of the replicas' ServiceAccount bound to
// no pod.
func serviceAccountToken(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	tr, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func request(t *testing.T, uid string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(stateauth.ReplicaURI(types.UID(uid)))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: stateauth.SignerName,
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			Usages:  []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
	}
}

// TestIdleConnectionsClosed (issue 28): a kept-alive connection the control
// role leaves unused is closed by the server.
func TestIdleConnectionsClosed(t *testing.T) {
	w := start(t)
	pod := w.pod(t, "dp-e")
	rep, addr := w.replica(t, pod, testutil.PodConfig(t, w.restCfg, pod), time.Second)
	testutil.Eventually(t, 60*time.Second, "the replica's certificate", func() (bool, string) { return rep.Ready(), "" })
	cfg := w.auth.TLSConfig(string(pod.UID))
	var conn *tls.Conn
	testutil.Eventually(t, 30*time.Second, "a request answered", func() (bool, string) {
		var err error
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return false, err.Error()
		}
		fmt.Fprintf(conn, "GET %s?key=x HTTP/1.1\r\nHost: replica\r\n\r\n", dataplane.BackendsPath)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil || n == 0 {
			conn.Close()
			return false, fmt.Sprint(err)
		}
		return true, ""
	})
	defer conn.Close()
	// The server closes it after its idle timeout (1 s here); 60 s is
	// far past it, and the read returns EOF rather than time out.
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue // the rest of the answer
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("an idle connection stayed open for 60 s")
		}
		return
	}
}
