package controller

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestSecureMetrics: with --metrics-secure the metrics endpoint speaks TLS
// and answers only a bearer token the API server accepts (TokenReview) for
// a user allowed GET on /metrics (SubjectAccessReview) — what the chart's
// metrics-reader ClusterRole grants a scraper.
func TestSecureMetrics(t *testing.T) {
	restCfg := controlplane.Start(t)
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })

	// A series of our own on the registry the metrics server serves, to
	// recognise a real answer.
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: "zerodrop_test_secure_metrics", Help: "test"})
	probe.Set(1)
	if err := ctrlmetrics.Registry.Register(probe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrlmetrics.Registry.Unregister(probe) })

	addr := freeAddr(t)
	cfg := haproxyConfig(restCfg, dir, "127.0.103.0/24")
	cfg.MetricsAddr, cfg.MetricsSecure = addr, true
	startController(t, cfg)

	// The certificate is self-signed: what is under test is who may read.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(token string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}

	testutil.Eventually(t, 60*time.Second, "the metrics server to refuse a call without a token", func() (bool, string) {
		code, body, err := get("")
		return err == nil && code == http.StatusUnauthorized, fmt.Sprintf("code %d err %v body %.200s", code, err, body)
	})

	const ns = "default"
	token := func(sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}

	// Authenticated, not authorized.
	stranger := token("stranger")
	if code, body, err := get(stranger); err != nil || code != http.StatusForbidden {
		t.Fatalf("a token without the metrics-reader role: code %d err %v body %.200s; want 403", code, err, body)
	}

	// The chart's metrics-reader ClusterRole, bound to a scraper.
	scraper := token("scraper")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "zerodrop-test-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "zerodrop-test-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The filter caches authorization decisions only briefly, and the
	// binding takes effect once the apiserver's RBAC informer sees it.
	testutil.Eventually(t, 60*time.Second, "the metrics-reader to get the metrics", func() (bool, string) {
		code, body, err := get(scraper)
		return err == nil && code == http.StatusOK && strings.Contains(body, "zerodrop_test_secure_metrics 1"),
			fmt.Sprintf("code %d err %v body %.200s", code, err, body)
	})
	if code, _, err := get(stranger); err != nil || code != http.StatusForbidden {
		t.Errorf("after binding the scraper, the stranger got code %d err %v; want 403", code, err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
