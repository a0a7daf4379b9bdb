package rules_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

// TestInjectedSidecars: a pause placeholder is not a serving container; App
// Mesh's injected Envoy stops after its 20 s preStop (ZD206, an error: it
// carries the inbound connections), except in a virtual gateway's pod; an
// injected container whose stop the manifest does not resolve (Kuma, Consul,
// any webhook of the input that selects the pod) is named in the ZD201
// explanation rather than counted; Vault's agent serves nothing and is not.
func TestInjectedSidecars(t *testing.T) {
	podLabel := func(k, v string) func(f *fixture) {
		return func(f *fixture) { f.dep.Spec.Template.Labels[k] = v }
	}
	podAnnotation := func(k, v string) func(f *fixture) {
		return func(f *fixture) {
			if f.dep.Spec.Template.Annotations == nil {
				f.dep.Spec.Template.Annotations = map[string]string{}
			}
			f.dep.Spec.Template.Annotations[k] = v
		}
	}
	nsLabel := func(k, v string) func(f *fixture) {
		return func(f *fixture) { f.extra = append(f.extra, namespaceObj("shop", map[string]string{k: v})) }
	}
	pauseOnly := func(f *fixture) {
		f.spec().Containers = []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"}}
	}
	noPreStop := func(f *fixture) { f.container().Lifecycle = nil }
	webhook := func(objectSelector *metav1.LabelSelector, nsSelector *metav1.LabelSelector) func(f *fixture) {
		return func(f *fixture) {
			cfg := &manifest.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "injector"},
				Webhooks: []manifest.MutatingWebhook{{Name: "pods.injector.example", ObjectSelector: objectSelector, NamespaceSelector: nsSelector,
					Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}}}
			f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "app.yaml", Line: 90}, Kind: manifest.KindMutatingWebhook, Obj: cfg})
		}
	}
	byName := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{name}}}}
	}
	cases := []struct {
		name   string
		mutate func(f *fixture)
		// rule → container that must carry it; a rule absent from want
		// must not fire on the pod's containers.
		want map[string]string
		// explain must appear in the ZD201 finding's explanation.
		explain string
		// without must not.
		without string
	}{
		{"pause placeholder serves nothing", pauseOnly, map[string]string{}, "", ""},
		{"pause placeholder with Kuma injection", all(pauseOnly, podLabel("kuma.io/sidecar-injection", "enabled")), map[string]string{}, "", ""},
		{"app mesh from the namespace", nsLabel("appmesh.k8s.aws/sidecarInjectorWebhook", "enabled"), map[string]string{"ZD206": "app"}, "", ""},
		{"app mesh on the pod", podAnnotation("appmesh.k8s.aws/sidecarInjectorWebhook", "enabled"), map[string]string{"ZD206": "app"}, "", ""},
		{"app mesh opted out on the pod", all(nsLabel("appmesh.k8s.aws/sidecarInjectorWebhook", "enabled"), podAnnotation("appmesh.k8s.aws/sidecarInjectorWebhook", "disabled")), map[string]string{}, "", ""},
		{"app mesh virtual gateway", all(nsLabel("appmesh.k8s.aws/sidecarInjectorWebhook", "enabled"), func(f *fixture) { f.container().Name = "envoy" }), map[string]string{}, "", ""},
		{"kuma stop unknown, named", all(noPreStop, podLabel("kuma.io/sidecar-injection", "enabled")), map[string]string{"ZD201": "app"}, "Kuma's kuma-sidecar (label kuma.io/sidecar-injection: enabled)", ""},
		{"kuma from the namespace", all(noPreStop, nsLabel("kuma.io/sidecar-injection", "enabled")), map[string]string{"ZD201": "app"}, "namespace label kuma.io/sidecar-injection", ""},
		{"consul stop unknown, named", all(noPreStop, podAnnotation("consul.hashicorp.com/connect-inject", "true")), map[string]string{"ZD201": "app"}, "Consul's consul-dataplane", ""},
		{"vault agent serves nothing", all(noPreStop, podAnnotation("vault.hashicorp.com/agent-inject", "true")), map[string]string{"ZD201": "app"}, "", ""},
		{"webhook of the input selecting the pod", all(noPreStop, webhook(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, byName("shop"))), map[string]string{"ZD201": "app"}, "MutatingWebhookConfiguration injector/pods.injector.example", ""},
		{"webhook of the input for another namespace", all(noPreStop, webhook(nil, byName("kube-system"))), map[string]string{"ZD201": "app"}, "", ""},
		{"webhook of the input for other pods", all(noPreStop, webhook(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, nil)), map[string]string{"ZD201": "app"}, "", ""},
		{"a mesh's own webhook is named by the mesh", all(noPreStop, podLabel("kuma.io/sidecar-injection", "enabled"), webhook(nil, nil)), map[string]string{"ZD201": "app"}, "Kuma's", "MutatingWebhookConfiguration"},
		{"istio's webhook is no unknown injection", all(noPreStop, podLabel("sidecar.istio.io/inject", "true"), webhook(nil, nil)), map[string]string{"ZD201": "app"}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.mutate(f)
			rep := f.analyze()
			for _, id := range []string{"ZD101", "ZD201", "ZD206"} {
				i := slices.IndexFunc(rep.Findings, func(fd rules.Finding) bool { return fd.Rule == id })
				ctr, want := tc.want[id]
				if (i >= 0) != want {
					t.Fatalf("%s fires = %v, want %v; findings:\n%s", id, i >= 0, want, dump(rep.Findings))
				}
				if i >= 0 && rep.Findings[i].Container != ctr {
					t.Errorf("%s on container %q, want %q", id, rep.Findings[i].Container, ctr)
				}
				if id == "ZD206" && i >= 0 && rep.Findings[i].Severity != rules.Error {
					t.Errorf("ZD206 severity %s, want error (Envoy carries the inbound connections)", rep.Findings[i].Severity)
				}
				if id == "ZD201" && i >= 0 {
					explain := strings.Join(rep.Findings[i].Explain, "\n")
					injected := strings.Contains(explain, "injected: ")
					if injected != (tc.explain != "") || !strings.Contains(explain, tc.explain) {
						t.Errorf("ZD201 explanation %q, want it to name %q", explain, tc.explain)
					}
					if tc.without != "" && strings.Contains(explain, tc.without) {
						t.Errorf("ZD201 explanation %q names %q", explain, tc.without)
					}
				}
			}
		})
	}
}
