package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// stderrLogger prints to stderr, which go test shows for a failing package.
func stderrLogger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		os.Stderr.WriteString(time.Now().Format("15:04:05.000 ") + prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func init() { ctrllog.SetLogger(stderrLogger()) }

const testNS = "zerodrop-system"

var freePort = testutil.FreePort

// webhookConfiguration calls https://127.0.0.1:port/mutate for pods of
// namespaces labelled cert-test=on, with failurePolicy Fail: a certificate
// the API server does not trust fails the pod's creation.
func webhookConfiguration(port int) *admissionregistrationv1.MutatingWebhookConfiguration {
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/mutate"
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfiguration},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "rotation.zerodrop.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cert-test": "on"}},
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:    ptr.To[int32](5),
		}},
	}
}

// serveWebhook serves a handler that labels pods, with the certificate
// files in dir (reloaded by controller-runtime's certificate watcher).
func serveWebhook(t *testing.T, port int, dir string) {
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	srv.Register("/mutate", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Patched("", jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/labels", Value: map[string]string{"mutated": "yes"}})
	})})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Start(ctx); err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// servedCert is the certificate the webhook server presents now.
func servedCert(port int) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func waitServed(t *testing.T, port int, want *x509.Certificate) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := servedCert(port)
		if err == nil && got.Equal(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook server does not present the stored certificate (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type fixture struct {
	t     *testing.T
	admin client.Client
	m     *Manager
	port  int
	dir   string
}

func (f *fixture) secret() *corev1.Secret {
	s := &corev1.Secret{}
	if err := f.admin.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: DefaultSecretName}, s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) mwc() *admissionregistrationv1.MutatingWebhookConfiguration {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := f.admin.Get(context.Background(), types.NamespacedName{Name: DefaultWebhookConfiguration}, m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) sync() {
	f.t.Helper()
	if err := f.m.Sync(context.Background()); err != nil {
		f.t.Fatalf("Sync: %v", err)
	}
}

// published checks that the caBundle is the Secret's and returns its CAs.
func (f *fixture) published() []*x509.Certificate {
	f.t.Helper()
	bundle := f.mwc().Webhooks[0].ClientConfig.CABundle
	if !bytes.Equal(bundle, f.secret().Data[KeyBundle]) {
		f.t.Fatalf("caBundle is not the Secret's bundle")
	}
	cas, err := ParseCertificates(bundle)
	if err != nil {
		f.t.Fatal(err)
	}
	return cas
}

// createPod must succeed at once: the API server calls the webhook with
// failurePolicy Fail, so an untrusted certificate fails it.
func (f *fixture) createPod() {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "rot", GenerateName: "p-"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}},
	}
	if err := f.admin.Create(context.Background(), p); err != nil {
		f.t.Fatalf("create pod through the webhook: %v", err)
	}
	if p.Labels["mutated"] != "yes" {
		f.t.Fatalf("pod not mutated: labels %v", p.Labels)
	}
}

// createPodEventually retries createPod's check for up to 10s.
func (f *fixture) createPodEventually() {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "rot", GenerateName: "p-"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}},
		}
		err := f.admin.Create(context.Background(), p)
		if err == nil && p.Labels["mutated"] == "yes" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the API server never reached the webhook: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestManagerOnRealAPIServer(t *testing.T) {
	env := controlplane.StartEnv(t)
	admin, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	port := freePort(t)
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rot", Labels: map[string]string{"cert-test": "on"}}},
		webhookConfiguration(port),
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	m, err := New(Options{
		Client: admin, Namespace: testNS, CertDir: dir, ExtraHosts: []string{"127.0.0.1"},
		CAValidity: time.Hour, ServingValidity: 30 * time.Minute, Overlap: 3 * time.Second,
		Logger: stderrLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, admin: admin, m: m, port: port, dir: dir}

	// First start: CA and serving certificate issued, stored, published,
	// written; the API server reaches the webhook through them.
	f.sync()
	if s := f.secret(); s.Type != corev1.SecretTypeTLS || len(s.Data[KeyCAKey]) == 0 {
		t.Fatalf("secret: type %q, keys %d", s.Type, len(s.Data))
	}
	if cas := f.published(); len(cas) != 1 {
		t.Fatalf("want one CA published, got %d", len(cas))
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil || !bytes.Equal(onDisk, f.secret().Data[KeyServingCert]) {
		t.Fatalf("tls.crt on disk is not the Secret's (%v)", err)
	}
	serveWebhook(t, port, dir)
	stored, _ := ParseCertificates(f.secret().Data[KeyServingCert])
	waitServed(t, port, stored[0])
	// The API server's webhook client may not have the configuration yet.
	f.createPodEventually()

	t.Run("a sync with nothing due writes nothing", func(t *testing.T) {
		s, w := f.secret().ResourceVersion, f.mwc().ResourceVersion
		f.sync()
		if f.secret().ResourceVersion != s || f.mwc().ResourceVersion != w {
			t.Errorf("Secret or webhook configuration written by a no-op sync")
		}
	})

	t.Run("a clobbered caBundle is put back", func(t *testing.T) {
		mwc := f.mwc()
		orig := mwc.DeepCopy()
		mwc.Webhooks[0].ClientConfig.CABundle = nil
		if err := admin.Patch(ctx, mwc, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		f.sync()
		f.published()
		f.createPodEventually()
	})

	t.Run("CA rotation keeps both CAs trusted until the new certificate is served", func(t *testing.T) {
		// A CA with ten minutes of its hour left, and a certificate from it.
		now := time.Now()
		old, err := NewCA(caName, now.Add(-50*time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		serving, err := NewServing(old, m.policy.Hosts, now, 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s := f.secret()
		encode(State{CA: old, Serving: serving, Trusted: []*x509.Certificate{old.Cert}, Since: now.Add(-time.Hour)}, s)
		if err := admin.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		// The CA is due: a new CA is trusted next to it; the old CA's
		// certificate is still served.
		f.sync()
		cas := f.published()
		if len(cas) != 2 || !cas[0].Equal(old.Cert) {
			t.Fatalf("after the new CA: want [old, new] published, got %d CAs", len(cas))
		}
		newCA := cas[1]
		waitServed(t, port, serving.Cert)
		// Only a seeded certificate is served the moment its CA is first
		// published: give the API server's informer time to see the bundle.
		f.createPodEventually()

		// Within the overlap nothing moves.
		rv := f.secret().ResourceVersion
		f.sync()
		if f.secret().ResourceVersion != rv {
			t.Fatalf("the serving certificate moved to the new CA within the overlap")
		}

		time.Sleep(m.opts.Overlap)
		f.sync()
		if cas := f.published(); len(cas) != 2 {
			t.Fatalf("old CA dropped together with the serving certificate's move")
		}
		renewed, _ := ParseCertificates(f.secret().Data[KeyServingCert])
		if !signedBy(renewed[0], newCA) {
			t.Fatalf("serving certificate not moved to the new CA")
		}
		waitServed(t, port, renewed[0])
		f.createPod()

		time.Sleep(m.opts.Overlap)
		f.sync()
		if cas := f.published(); len(cas) != 1 || !cas[0].Equal(newCA) {
			t.Fatalf("want only the new CA published, got %d CAs", len(cas))
		}
		f.createPod()
	})
}

// TestManagersRace starts two replicas at once on an empty namespace: one
// creates the Secret, the other loses the race, re-reads and agrees.
func TestManagersRace(t *testing.T) {
	env := controlplane.StartEnv(t)
	admin, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for i, dir := range dirs {
		m, err := New(Options{Client: admin, Namespace: testNS, CertDir: dir, Logger: stderrLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = m.Sync(context.Background()) })
	}
	wg.Wait()
	s := &corev1.Secret{}
	if err := admin.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: DefaultSecretName}, s); err != nil {
		t.Fatal(err)
	}
	for i, dir := range dirs {
		if errs[i] != nil {
			t.Errorf("replica %d: %v", i, errs[i])
		}
		got, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
		if err != nil || !bytes.Equal(got, s.Data[KeyServingCert]) {
			t.Errorf("replica %d serves another certificate than the Secret's (%v)", i, err)
		}
	}
}
