package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/controlplane"
)

// TestNotReadyBeforeCacheSync: a replica whose informer caches have not
// synced would admit pods from an empty cache (no Service selects the pod,
// so no gate), so it must not report ready. The manager runs as a user that
// may not list Namespaces or Services yet: the webhook server starts, the
// caches cannot sync, and /readyz must say not ready until the access is
// granted.
func TestNotReadyBeforeCacheSync(t *testing.T) {
	env := controlplane.StartEnv(t)
	ctx := t.Context()
	admin, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		namespace("shop", map[string]string{LabelInject: InjectEnabled}), zerodropService("shop"),
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	const user = "zerodrop-webhook-ready-test"
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}

	ca, err := certs.NewCA("ready-test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := certs.NewServing(ca, []string{"127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	webhookPort, probePort := freePort(t), freePort(t)
	mgr, err := manager.New(cfg, manager.Options{
		Logger:                 stderrLogger(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(probePort)),
		WebhookServer:          ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: webhookPort, CertDir: certDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, mgr, Options{DrainHost: "10.0.0.90", Logger: stderrLogger().WithName("webhook")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		// t.Context is cancelled before cleanups run.
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	hc := &http.Client{Timeout: 5 * time.Second}
	probe := func(path string) (int, string, error) {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d%s", probePort, path))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	// The webhook server answers: only the caches are missing.
	eventually(t, 60*time.Second, "the webhook server to start (/readyz/webhook)", func() (bool, error) {
		code, body, err := probe("/readyz/webhook")
		if err != nil {
			return false, err
		}
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})
	if code, body, err := probe("/readyz"); err != nil || code == http.StatusOK {
		t.Fatalf("/readyz answered %d %q (%v) while the caches cannot sync (no list access): a replica would admit pods without gates", code, body, err)
	}

	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"namespaces", "services"}, Verbs: []string{"get", "list", "watch"},
		}}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The informers retry their list with a backoff of up to 30 s.
	eventually(t, 120*time.Second, "/readyz once the caches synced", func() (bool, error) {
		code, body, err := probe("/readyz")
		if err != nil {
			return false, err
		}
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})
	// Ready means it injects: the cache holds the Service.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	whc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var review admissionv1.AdmissionReview
	if err := postReview(whc, webhookPort, webPodIn("shop"), &review); err != nil {
		t.Fatal(err)
	}
	var patch []struct{ Path string }
	if review.Response != nil {
		_ = json.Unmarshal(review.Response.Patch, &patch)
	}
	if !slices.ContainsFunc(patch, func(p struct{ Path string }) bool { return p.Path == "/spec/readinessGates" }) {
		t.Errorf("a ready webhook did not add the readiness gate: response %+v", review.Response)
	}
}
