package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const serviceAccount = "system:serviceaccount:zerodrop-system:zerodrop"

// manifests parses every object of the files kustomization.yaml lists, in
// its order, and checks that it lists every YAML file of deploy/.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := deployDir(t)
	var kust struct{ Resources []string }
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(kust.Resources, base) {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	var out []*unstructured.Unstructured
	for _, name := range kust.Resources {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
		f.Close()
	}
	return out
}

// TestDeployManifests applies deploy/ to a real kube-apiserver (no kubelet:
// the Deployment is stored, not run), then runs the webhook and its
// certificate manager as the deployed ServiceAccount.
func TestDeployManifests(t *testing.T) {
	// kubeadm's default service range: deploy/ gives the drain Service a
	// fixed clusterIP from it (docs/webhook.md).
	env := controlplane.StartEnvServiceRange(t, "10.96.0.0/12")
	ctx := t.Context()
	admin, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t)
	apply := func() map[string]string {
		versions := map[string]string{}
		for _, u := range objs {
			obj := u.DeepCopy()
			id := fmt.Sprintf("%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
			if err := admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("zerodrop-deploy-test")); err != nil {
				t.Fatalf("apply %s: %v", id, err)
			}
			versions[id] = obj.GetResourceVersion()
		}
		return versions
	}
	first := apply()
	for _, id := range []string{
		"Namespace /zerodrop-system", "ServiceAccount zerodrop-system/zerodrop", "ClusterRole /zerodrop",
		"ClusterRoleBinding /zerodrop", "Role zerodrop-system/zerodrop", "RoleBinding zerodrop-system/zerodrop",
		"Service zerodrop-system/zerodrop-drain", "Service zerodrop-system/zerodrop-webhook",
		"Deployment zerodrop-system/zerodrop", "PodDisruptionBudget zerodrop-system/zerodrop",
		"MutatingWebhookConfiguration /zerodrop",
	} {
		if _, ok := first[id]; !ok {
			t.Errorf("deploy/ has no %s (applied: %v)", id, first)
		}
	}
	if again := apply(); !mapsEqual(first, again) {
		t.Errorf("applying the same manifests again changed objects:\nfirst %v\nthen  %v", first, again)
	}

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := admin.Get(ctx, client.ObjectKey{Name: "zerodrop"}, mwc); err != nil {
		t.Fatal(err)
	}
	w := mwc.Webhooks[0]
	// The handler writes Events, except on dry runs.
	if *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		t.Errorf("webhook sideEffects %s, want %s: the handler records Events on real requests", *w.SideEffects, admissionregistrationv1.SideEffectClassNoneOnDryRun)
	}
	if *w.FailurePolicy != admissionregistrationv1.Ignore ||
		*w.TimeoutSeconds != 5 || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy ||
		w.NamespaceSelector.MatchLabels[LabelInject] != InjectEnabled || *w.ClientConfig.Service.Path != DefaultPath {
		t.Errorf("webhook configuration as stored: %+v", w)
	}

	d := &appsv1.Deployment{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: "zerodrop"}, d); err != nil {
		t.Fatal(err)
	}
	// Injected hooks call --webhook-drain-host; it must be the drain
	// Service's fixed clusterIP, which a reinstall keeps.
	drainHost := containerArg(d.Spec.Template.Spec.Containers[0], "--webhook-drain-host")
	drain := &corev1.Service{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: DefaultDrainServiceName}, drain); err != nil {
		t.Fatal(err)
	}
	if drainHost == "" || drain.Spec.ClusterIP != drainHost {
		t.Errorf("drain Service clusterIP %q, controller --webhook-drain-host %q: want the same fixed address", drain.Spec.ClusterIP, drainHost)
	}

	t.Run("the controller's pod passes the namespace's restricted pod security", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
		pod.Namespace, pod.GenerateName = DefaultNamespace, "zerodrop-"
		if err := admin.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Errorf("a pod from the Deployment's template is refused: %v", err)
		}
	})
	t.Run("RBAC grants what the controller needs and no more", func(t *testing.T) { testRBAC(t, admin) })
	t.Run("webhook and certificates run as the ServiceAccount", func(t *testing.T) { testAsServiceAccount(t, env.Config, admin, drainHost) })
}

// containerArg is the value of the container's argument flag=value.
func containerArg(c corev1.Container, flag string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type access struct {
	verb, group, resource, sub, ns, name string
}

func testRBAC(t *testing.T, admin client.Client) {
	const sys = "zerodrop-system"
	allowed := []access{
		{"get", "", "services", "", "shop", ""}, {"list", "", "services", "", "", ""}, {"watch", "", "services", "", "", ""},
		{"patch", "", "services", "", "shop", "web"}, {"patch", "", "services", "status", "shop", "web"},
		{"get", "discovery.k8s.io", "endpointslices", "", "shop", ""}, {"list", "discovery.k8s.io", "endpointslices", "", "", ""},
		{"watch", "discovery.k8s.io", "endpointslices", "", "", ""},
		{"get", "", "nodes", "", "", "n1"}, {"list", "", "nodes", "", "", ""}, {"watch", "", "nodes", "", "", ""},
		{"get", "", "pods", "", "shop", "p"}, {"list", "", "pods", "", "", ""}, {"watch", "", "pods", "", "", ""},
		{"patch", "", "pods", "status", "shop", "p"},
		{"get", "", "namespaces", "", "", "shop"}, {"list", "", "namespaces", "", "", ""}, {"watch", "", "namespaces", "", "", ""},
		{"create", "", "events", "", "shop", ""}, {"patch", "", "events", "", "shop", "e"},
		{"create", "events.k8s.io", "events", "", "shop", ""}, {"patch", "events.k8s.io", "events", "", "shop", "e"},
		{"create", "coordination.k8s.io", "leases", "", sys, ""},
		{"get", "coordination.k8s.io", "leases", "", sys, "zerodrop-controller"},
		{"update", "coordination.k8s.io", "leases", "", sys, "zerodrop-controller"},
		{"create", "", "secrets", "", sys, ""},
		{"get", "", "secrets", "", sys, certs.DefaultSecretName}, {"update", "", "secrets", "", sys, certs.DefaultSecretName},
		{"get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "zerodrop"},
		{"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "zerodrop"},
	}
	denied := []access{
		{"create", "", "services", "", "shop", ""}, {"delete", "", "services", "", "shop", "web"},
		// The service controller patches (finalizer, status), it never updates.
		{"update", "", "services", "", "shop", "web"}, {"update", "", "services", "status", "shop", "web"},
		{"update", "", "pods", "status", "shop", "p"}, {"create", "", "pods", "", "shop", ""}, {"delete", "", "pods", "", "shop", "p"},
		{"patch", "", "nodes", "", "", "n1"}, {"update", "", "namespaces", "", "", "shop"},
		{"get", "", "secrets", "", sys, "other"}, {"list", "", "secrets", "", sys, ""}, {"watch", "", "secrets", "", sys, ""},
		{"get", "", "secrets", "", "shop", certs.DefaultSecretName}, {"delete", "", "secrets", "", sys, certs.DefaultSecretName},
		{"get", "coordination.k8s.io", "leases", "", "kube-system", "zerodrop-controller"},
		{"get", "coordination.k8s.io", "leases", "", sys, "other"}, {"delete", "coordination.k8s.io", "leases", "", sys, "zerodrop-controller"},
		{"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "other"},
		{"list", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", ""},
		{"delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "zerodrop"},
		{"patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "zerodrop"},
		{"get", "", "configmaps", "", sys, ""}, {"get", "apps", "deployments", "", sys, "zerodrop"},
	}
	check := func(a access) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   serviceAccount,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:zerodrop-system", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns, Name: a.name,
			},
		}}
		if err := admin.Create(context.Background(), sar); err != nil {
			t.Fatalf("SubjectAccessReview %+v: %v", a, err)
		}
		return sar.Status.Allowed
	}
	for _, a := range allowed {
		if !check(a) {
			t.Errorf("denied, but the controller needs it: %+v", a)
		}
	}
	for _, a := range denied {
		if check(a) {
			t.Errorf("allowed, but the controller does not need it: %+v", a)
		}
	}
}

// testAsServiceAccount starts a manager impersonating the deployed
// ServiceAccount, with leader election in zerodrop-system and Setup with
// certificate management, then calls the webhook server over TLS trusting
// only the caBundle the certificate manager published.
func testAsServiceAccount(t *testing.T, cfg *rest.Config, admin client.Client, drainHost string) {
	ctx := t.Context()
	for _, obj := range []client.Object{
		namespace("shop", map[string]string{LabelInject: InjectEnabled}), zerodropService("shop"),
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:zerodrop-system", "system:authenticated"}}
	port := freePort(t)
	certDir := t.TempDir()
	mgr, err := manager.New(sa, manager.Options{
		Logger:                  stderrLogger(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: DefaultNamespace,
		LeaderElectionID:        "zerodrop-controller",
		WebhookServer:           ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	if err := Setup(mctx, mgr, Options{ManageCerts: true, DrainHost: drainHost, Logger: stderrLogger().WithName("webhook")}); err != nil {
		cancel()
		t.Fatalf("Setup as the ServiceAccount: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatalf("not elected leader: the Lease RBAC does not suffice")
	}

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := admin.Get(ctx, client.ObjectKey{Name: "zerodrop"}, mwc); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: certs.DefaultSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	bundle := mwc.Webhooks[0].ClientConfig.CABundle
	if len(bundle) == 0 || !bytes.Equal(bundle, secret.Data[certs.KeyBundle]) {
		t.Fatalf("caBundle of the deployed webhook configuration is not the Secret's bundle")
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: certs.DefaultServiceName + "." + DefaultNamespace + ".svc",
	}}}
	var review admissionv1.AdmissionReview
	eventually(t, 30*time.Second, "a patch from the webhook served with the managed certificate", func() (bool, error) {
		review = admissionv1.AdmissionReview{}
		if err := postReview(hc, port, webPodIn("shop"), &review); err != nil {
			return false, err
		}
		return review.Response != nil && len(review.Response.Patch) > 0, nil
	})
	var patch []struct{ Path string }
	if err := json.Unmarshal(review.Response.Patch, &patch); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(patch, func(p struct{ Path string }) bool { return p.Path == "/spec/readinessGates" }) {
		t.Errorf("patch %s does not add the readiness gate %s", review.Response.Patch, podgate.ConditionType)
	}
	// The drain hook calls the deployed drain Service's fixed ClusterIP.
	drain := &corev1.Service{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: DefaultDrainServiceName}, drain); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(review.Response.Patch, []byte(`"host":"`+drain.Spec.ClusterIP+`"`)) {
		t.Errorf("patch %s does not call the drain Service at %s", review.Response.Patch, drain.Spec.ClusterIP)
	}
}

func postReview(hc *http.Client, port int, pod *corev1.Pod, into *admissionv1.AdmissionReview) error {
	raw, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "review-1", Operation: admissionv1.Create, Namespace: pod.Namespace,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		return err
	}
	resp, err := hc.Post("https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port))+DefaultPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

var freePort = testutil.FreePort
