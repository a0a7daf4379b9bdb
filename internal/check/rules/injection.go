package rules

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A mutating webhook adds containers to a pod when it is created, so the
// manifest does not show them. The rules need to know two things about such
// a container: whether it carries the Service's connections (a mesh proxy in
// front of the application), and what it does at shutdown. Where the manifest
// resolves that, ZD206 holds the injected sidecar's stop against the
// deregistration time (sidecars.go); where it cannot, the findings on the
// pod's serving containers say so in their explanation instead of guessing.
//
// Injection signals read here, with what each injected container does at
// shutdown:
//   - Dapr (dapr.io/enabled), Linkerd (linkerd.io/inject), Istio
//     (sidecar.istio.io/inject, istio-injection, istio.io/rev) and AWS App
//     Mesh (appmesh.k8s.aws/sidecarInjectorWebhook): see sidecars.go.
//   - Kuma and Kong Mesh (kuma.io/sidecar-injection: enabled on the pod or
//     its namespace; "disabled" on the pod opts out,
//     https://developer.konghq.com/mesh/production/dp-config/dpp-on-kubernetes):
//     the kuma-sidecar (kuma-dp running Envoy) carries the pod's inbound
//     connections through transparent proxying. How long it keeps serving
//     after SIGTERM is the control plane's injector configuration, which no
//     pod manifest shows: unknown here.
//   - Consul (consul.hashicorp.com/connect-inject: "true"): the injected
//     consul-dataplane carries inbound connections; its graceful shutdown
//     (consul-k8s "proxy lifecycle", hashicorp/consul-k8s#2233, and the
//     consul.hashicorp.com/sidecar-proxy-lifecycle-* annotations) defaults to
//     the Helm chart's connectInject.sidecarProxy.lifecycle values, which the
//     manifest does not show: unknown here.
//   - Vault agent (vault.hashicorp.com/agent-inject: "true",
//     https://developer.hashicorp.com/vault/docs/platform/k8s/injector):
//     renders secrets into a shared volume; it serves no connection, so its
//     stop drops nothing the load balancer sends.
//   - Any other MutatingWebhookConfiguration of the input whose webhooks
//     select the pod on CREATE: what it adds is unknown. It is named only
//     when no mesh signal above explains the injection (the configuration
//     is then that mesh's injector).
//
// A container running only the pause image (registry.k8s.io/pause) is a
// placeholder for such an injected container: pause listens on nothing, so
// it is never a serving container (servingContainers).

// injection is a container a webhook adds to the pod.
type injection struct {
	who   string // "Kuma's kuma-sidecar (label kuma.io/sidecar-injection: enabled)"
	stop  string // what it does at shutdown and why that is unknown
	known bool   // its stop is known: it drops nothing (a Vault agent)
}

// injections lists the webhook-injected containers the pod gets, as far as
// the manifest says.
func (c *check) injections() []injection {
	var out []injection
	t := c.w.tmpl
	podOr := func(key string) (string, string) {
		if v, ok := t.Labels[key]; ok {
			return v, "label"
		}
		if v, ok := t.Annotations[key]; ok {
			return v, "annotation"
		}
		if v, ok := c.nsLabels[key]; ok {
			return v, "namespace label"
		}
		return "", ""
	}
	if v, where := podOr("kuma.io/sidecar-injection"); v == "enabled" {
		out = append(out, injection{who: fmt.Sprintf("Kuma's kuma-sidecar (%s kuma.io/sidecar-injection: enabled)", where),
			stop: "it carries the pod's inbound connections; how long it keeps serving after SIGTERM is the control plane's injector configuration, which the manifest does not show"})
	}
	if v, where := podOr("consul.hashicorp.com/connect-inject"); v == "true" {
		out = append(out, injection{who: fmt.Sprintf("Consul's consul-dataplane (%s consul.hashicorp.com/connect-inject: \"true\")", where),
			stop: "it carries the pod's inbound connections; its graceful shutdown follows the Helm chart's proxy lifecycle values unless the pod's consul.hashicorp.com/sidecar-proxy-lifecycle-* annotations say otherwise, which the manifest does not resolve"})
	}
	if t.Annotations["vault.hashicorp.com/agent-inject"] == "true" {
		out = append(out, injection{who: "HashiCorp's vault-agent (annotation vault.hashicorp.com/agent-inject: \"true\")", known: true,
			stop: "it renders secrets into a shared volume and serves no connection: its stop drops nothing"})
	}
	if len(out) > 0 || c.meshInjects() {
		return out // the configuration is that mesh's injector: named by its own signal
	}
	for _, name := range c.webhooksInjecting() {
		out = append(out, injection{who: fmt.Sprintf("MutatingWebhookConfiguration %s of the input", name),
			stop: "its webhook selects these pods on CREATE; what it adds, and how that stops, is not in the manifest"})
	}
	return out
}

// meshInjects reports whether a mesh whose injected sidecar sidecars.go
// resolves (Dapr, Linkerd, Istio, App Mesh) injects into the pod.
func (c *check) meshInjects() bool {
	t := c.w.tmpl
	if t.Annotations[daprEnabled] == "true" || t.Annotations["linkerd.io/inject"] != "" || c.nsAnnots["linkerd.io/inject"] != "" ||
		t.Labels["sidecar.istio.io/inject"] != "" || t.Annotations["sidecar.istio.io/inject"] != "" ||
		c.nsLabels["istio-injection"] == "enabled" || c.nsLabels["istio.io/rev"] != "" {
		return true
	}
	_, ok := c.appMeshSidecar()
	return ok
}

// injectionNotes are explanation lines for a finding on a serving
// container: the injected containers whose stop the analyzer cannot know.
func (c *check) injectionNotes() []string {
	var out []string
	for _, in := range c.injections() {
		if !in.known {
			out = append(out, "injected: "+in.who+": "+in.stop+" (not counted)")
		}
	}
	return out
}

// webhooksInjecting returns the names of the input's mutating webhooks
// (configuration/webhook) that act on the pod's creation: a rule on pods
// with CREATE, an objectSelector that matches the pod template's labels, and
// a namespaceSelector that matches the namespace — its labels when the
// Namespace object is in the input; without it, only a selector on
// kubernetes.io/metadata.name can be decided, and any other counts as
// matching (the webhook may inject). A configuration is named once whatever
// its webhook count.
func (c *check) webhooksInjecting() []string {
	if len(c.ix.webhooks) == 0 {
		return nil
	}
	podLabels := labels.Set(c.w.tmpl.Labels)
	nsLabels := labels.Set{corev1.LabelMetadataName: c.w.ns}
	nsKnown := c.ix.byNS[c.w.ns] != nil && c.nsLabels != nil
	for k, v := range c.nsLabels {
		nsLabels[k] = v
	}
	var out []string
	for _, cfg := range c.ix.webhooks {
		for _, wh := range cfg.Webhooks {
			if !podCreate(wh.Rules) || !selectorMatches(wh.ObjectSelector, podLabels, true) {
				continue
			}
			if !selectorMatches(wh.NamespaceSelector, nsLabels, nsKnown || onlyNameKeys(wh.NamespaceSelector)) {
				continue
			}
			out = append(out, cfg.Name+"/"+wh.Name)
			break
		}
	}
	return out
}

// podCreate reports whether the rules cover creating pods in the core group.
func podCreate(rules []admissionregistrationv1.RuleWithOperations) bool {
	has := func(list []string, v string) bool {
		for _, s := range list {
			if s == v || s == "*" {
				return true
			}
		}
		return false
	}
	for _, r := range rules {
		ops := make([]string, len(r.Operations))
		for i, o := range r.Operations {
			ops[i] = string(o)
		}
		if has(ops, "CREATE") && has(r.APIGroups, "") && has(r.Resources, "pods") {
			return true
		}
	}
	return false
}

// selectorMatches applies a webhook's selector as the API server does (nil
// or empty matches everything). When decidable is false the labels are not
// all known, and the selector counts as matching.
func selectorMatches(ls *metav1.LabelSelector, set labels.Set, decidable bool) bool {
	if ls == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false // the API server rejects such a configuration
	}
	return !decidable || sel.Matches(set)
}

// onlyNameKeys reports whether a namespace selector tests nothing but the
// namespace's name label, which every namespace has.
func onlyNameKeys(ls *metav1.LabelSelector) bool {
	if ls == nil {
		return true
	}
	for k := range ls.MatchLabels {
		if k != corev1.LabelMetadataName {
			return false
		}
	}
	for _, e := range ls.MatchExpressions {
		if e.Key != corev1.LabelMetadataName {
			return false
		}
	}
	return true
}

// placeholder reports whether a container only holds a place for one a
// webhook injects: the pause image listens on nothing.
func placeholder(ctr *corev1.Container) bool {
	name := imageName(ctr.Image)
	return (name == "pause" || strings.HasPrefix(name, "pause-")) && len(ctr.Command) == 0 && len(ctr.Args) == 0
}
