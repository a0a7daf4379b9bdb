package install

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestChartDryRun applies the chart's objects to a real kube-apiserver with
// server-side dry run, so the API server's own validation (schemas, the
// drain Service's clusterIP in the service range, RBAC references, the
// namespace's restricted pod security) judges the render. Once with the
// defaults (deploy/), once with every optional part on; the CRDs those
// need (cert-manager, prometheus-operator) are stand-ins that accept any
// spec, so for them only the API group, version, kind and scope are checked.
func TestChartDryRun(t *testing.T) {
	// kubeadm's default service range, where drain.clusterIP's default lies.
	env := controlplane.StartEnvServiceRange(t, "10.96.0.0/12")
	ctx := t.Context()
	admin, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The release namespace, for real: deploy/namespace.yaml (labelled
	// with the restricted pod security standard).
	data, err := os.ReadFile(abs(t, "deploy/namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &ns.Object); err != nil {
		t.Fatal(err)
	}
	if ns.GetName() != namespace {
		t.Fatalf("deploy/namespace.yaml creates %q, the render's namespace is %q", ns.GetName(), namespace)
	}
	if err := admin.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	installCRDs(ctx, t, admin)
	// A client made after the CRDs exist, so its REST mapper knows them.
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	for _, set := range [][]string{nil, allFeatures, haproxyValues} {
		t.Run(fmt.Sprintf("set=%v", set), func(t *testing.T) {
			withHAProxy := slices.Contains(set, "provider=haproxy")
			objs := render(t, set...)
			kinds := map[string]int{}
			for _, u := range objs {
				obj := u.DeepCopy()
				id := fmt.Sprintf("%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll,
					client.FieldOwner("zerodrop-chart-test"), client.ForceOwnership); err != nil {
					t.Errorf("server-side dry run of %s: %v", id, err)
				}
				kinds[obj.GetKind()]++
			}
			want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
				"Deployment", "PodDisruptionBudget", "MutatingWebhookConfiguration"}
			if slices.Contains(set, allFeatures[0]) {
				want = append(want, "Issuer", "Certificate", "NetworkPolicy", "ServiceMonitor", "PrometheusRule")
			}
			if withHAProxy {
				want = append(want, "DaemonSet")
			}
			for _, k := range want {
				if kinds[k] == 0 {
					t.Errorf("the render has no %s (it has %v)", k, kinds)
				}
			}
			// Pod security is enforced on pods, not on Deployments: a pod
			// from the template must pass the namespace's restricted level.
			d := find(t, objs, "Deployment", "zerodrop")
			tmpl, _, _ := unstructured.NestedMap(d.Object, "spec", "template")
			pod := &unstructured.Unstructured{Object: tmpl}
			pod.SetAPIVersion("v1")
			pod.SetKind("Pod")
			pod.SetNamespace(namespace)
			pod.SetGenerateName("zerodrop-")
			if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
				t.Errorf("a pod from the Deployment's template is refused: %v", err)
			}
			if withHAProxy {
				dataPlanePodSecurity(ctx, t, admin, c, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
			}
		})
	}

	// Nothing was stored: dry run only.
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(svcs.Items) != 0 {
		t.Errorf("dry run stored %d Services", len(svcs.Items))
	}
}

// crds are stand-ins for the CRDs the optional parts need: the real group,
// version, kind and scope, any spec.
var crds = []struct{ group, kind, plural string }{
	{"cert-manager.io", "Issuer", "issuers"},
	{"cert-manager.io", "Certificate", "certificates"},
	{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
	{"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
}

func installCRDs(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	version := map[string]string{"cert-manager.io": "v1", "monitoring.coreos.com": "v1"}
	for _, d := range crds {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1",
			"kind":       "CustomResourceDefinition",
			"metadata":   map[string]any{"name": d.plural + "." + d.group},
			"spec": map[string]any{
				"group": d.group,
				"scope": "Namespaced",
				"names": map[string]any{"kind": d.kind, "plural": d.plural, "singular": strings.ToLower(d.kind), "listKind": d.kind + "List"},
				"versions": []any{map[string]any{
					"name": version[d.group], "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{
						"type":                                 "object",
						"x-kubernetes-preserve-unknown-fields": true,
					}},
				}},
			},
		}}
		if err := c.Create(ctx, crd); err != nil {
			t.Fatalf("CRD %s: %v", crd.GetName(), err)
		}
	}
	for _, d := range crds {
		name := d.plural + "." + d.group
		testutil.Eventually(t, 30*time.Second, "CRD "+name+" established", func() (bool, string) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, cond := range conds {
				m := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("conditions %v", conds)
		})
	}
}

// dataPlanePodSecurity: the data plane's pods use the host's network, which
// the restricted (and baseline) pod security levels refuse — the
// namespace's level must be privileged, as charts/zerodrop/README.md says.
// Refused in the restricted release namespace (deploy/namespace.yaml),
// admitted in one labelled as deploy/haproxy/namespace.yaml is.
func dataPlanePodSecurity(ctx context.Context, t *testing.T, admin, c client.Client, ds *unstructured.Unstructured) {
	t.Helper()
	tmpl, _, _ := unstructured.NestedMap(ds.Object, "spec", "template")
	pod := &unstructured.Unstructured{Object: tmpl}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetGenerateName("zerodrop-data-plane-")
	pod.SetNamespace(namespace)
	if err := c.Create(ctx, pod.DeepCopy(), client.DryRunAll); err == nil || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("a data-plane pod in the restricted namespace: %v; want refused for hostNetwork", err)
	}
	// deploy/haproxy/namespace.yaml's labels, on a namespace of another
	// name (the release namespace exists, restricted).
	data, err := os.ReadFile(abs(t, "deploy/haproxy/namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var committed corev1.Namespace
	if err := yaml.Unmarshal(data, &committed); err != nil {
		t.Fatal(err)
	}
	const privileged = "zerodrop-data-plane-test"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: privileged, Labels: committed.Labels}}
	if err := admin.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod.SetNamespace(privileged)
	if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Errorf("a data-plane pod in a privileged namespace is refused: %v", err)
	}
}
