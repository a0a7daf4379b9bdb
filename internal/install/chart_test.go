package install

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/metrics"
)

// TestChartLints: `helm lint` finds no error in the chart, with the deploy
// values, with every optional part on, and with the HAProxy data plane.
func TestChartLints(t *testing.T) {
	for _, set := range [][]string{nil, allFeatures, append(haproxyValues, allFeatures...)} {
		args := []string{"lint", chartDir, "--namespace", namespace, "--values", deployValues}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}

// TestDeployIsTheChartsRender: deploy/ (Azure) and deploy/haproxy/ (the
// HAProxy data plane) are exactly what hack/render-deploy.sh renders from
// the chart now, file for file and byte for byte, and hold no other
// manifest than their hand-written namespace.yaml.
func TestDeployIsTheChartsRender(t *testing.T) {
	root, helm := repo(t)
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "render-deploy.sh"), out)
	cmd.Env = append(os.Environ(), "HELM="+helm)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/render-deploy.sh: %v\n%s", err, msg)
	}
	for _, sub := range []string{".", "haproxy"} {
		dir := filepath.Join("deploy", sub)
		rendered, _ := filepath.Glob(filepath.Join(out, sub, "*.yaml"))
		committed, _ := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		if len(rendered) == 0 {
			t.Fatalf("hack/render-deploy.sh wrote nothing for %s", dir)
		}
		for _, f := range rendered {
			name := filepath.Base(f)
			want, _ := os.ReadFile(f)
			got, err := os.ReadFile(filepath.Join(root, dir, name))
			if err != nil {
				t.Errorf("%s/%s is missing: run hack/render-deploy.sh", dir, name)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s differs from the chart's render (%s): run hack/render-deploy.sh", dir, name, firstDiff(got, want))
			}
		}
		for _, f := range committed {
			name := filepath.Base(f)
			if name == "namespace.yaml" {
				continue
			}
			if _, err := os.Stat(filepath.Join(out, sub, name)); err != nil {
				t.Errorf("%s/%s is not rendered from the chart: run hack/render-deploy.sh (it removes stale files)", dir, name)
			}
		}
	}
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: committed %q, rendered %q", i+1, gl, wl)
		}
	}
	return "same lines"
}

// TestChartRefusesBadValues: values the controller cannot run with fail
// `helm template` with a message that names the problem.
func TestChartRefusesBadValues(t *testing.T) {
	cases := []struct {
		set  []string
		want []string
	}{
		{[]string{"provider=gcp"}, []string{`provider "gcp" is not installable`, "provider=azure, provider=haproxy or provider=aws"}},
		{[]string{"provider=aws"}, []string{"missing values for provider=aws", "aws.region"}},
		{[]string{"provider=haproxy"}, []string{"missing values for provider=haproxy", "haproxy.addressPool"}},
		{[]string{"azure.subscriptionID="}, []string{"missing values for provider=azure", "azure.subscriptionID"}},
		{[]string{"azure.resourceGroup=", "azure.loadBalancers="}, []string{"azure.resourceGroup", "azure.loadBalancers"}},
		{[]string{"azure.workloadIdentity.clientID="}, []string{"azure.workloadIdentity.clientID"}},
		{[]string{"provider=haproxy", "haproxy.addressPool=192.0.2.0/24", "azure.gateOnlyLoadBalancers=kubernetes"},
			[]string{"azure.gateOnlyLoadBalancers is set but provider=haproxy"}},
		// A node's second data-plane pod (a surge) binds the alternate
		// while the first holds the others.
		{[]string{"provider=haproxy", "haproxy.addressPool=192.0.2.0/24", "haproxy.stateAlternatePort=9094"},
			[]string{"haproxy.stateAlternatePort 9094", "haproxy.metricsPort"}},
		{[]string{"provider=haproxy", "haproxy.addressPool=192.0.2.0/24", "haproxy.stateAlternatePort=9092"},
			[]string{"haproxy.stateAlternatePort 9092", "haproxy.statePort"}},
	}
	for _, tc := range cases {
		out, err := template(t, tc.set...)
		if err == nil {
			t.Errorf("helm template --set %v succeeded, want a failure:\n%.300s", tc.set, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("helm template --set %v: %v\ndoes not say %q", tc.set, err, w)
			}
		}
	}
	// Without workload identity no client ID is needed.
	if _, err := template(t, "azure.workloadIdentity.enabled=false", "azure.workloadIdentity.clientID="); err != nil {
		t.Errorf("workload identity off: %v", err)
	}
}

// leastPrivilege is what deploy/rbac.yaml granted before the chart: the
// chart must grant exactly this (metrics authentication has ClusterRoles of
// its own).
var leastPrivilege = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{"zerodrop"}, Verbs: []string{"get", "patch"}},
}

var leastPrivilegeNamespaced = []rbacv1.PolicyRule{
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"zerodrop-controller"}, Verbs: []string{"get", "update"}},
	{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"zerodrop-webhook-tls"}, Verbs: []string{"get", "update"}},
	drainKeyGrant,
}

// drainKeyGrant is the drain key's Secret (drain.relay.enabled, the
// default): the relays' tokens derive from it.
var drainKeyGrant = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"zerodrop-drain-key"}, Verbs: []string{"get", "update"}}

// controllerFlags parses the controller container's arguments with the
// controller's own flags, so a renamed or mistyped flag fails here.
func controllerFlags(t *testing.T, d *appsv1.Deployment) (controller.Config, []string) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "controller" {
		t.Fatalf("args %q: want the controller subcommand first", c.Args)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", namespace))
	}
	cfg, err := controller.ParseArgs(args)
	if err != nil {
		t.Fatalf("controller args %q: %v", args, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the controller refuses the chart's arguments: %v", err)
	}
	return cfg, c.Args
}

// TestChartProperties checks what the controller and its users depend on,
// in the default render (deploy/) and with every optional part on.
func TestChartProperties(t *testing.T) {
	for _, set := range [][]string{nil, allFeatures} {
		t.Run(fmt.Sprintf("set=%v", set), func(t *testing.T) {
			objs := render(t, set...)
			certManager := len(set) > 0
			d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "zerodrop"))
			cfg, args := controllerFlags(t, d)
			if cfg.Provider != "azure" || !slices.Contains(args, "--provider=azure") {
				t.Errorf("provider %q: want --provider=azure", cfg.Provider)
			}
			if cfg.Azure.SubscriptionID != "00000000-0000-0000-0000-000000000000" || cfg.Azure.LoadBalancers != "kubernetes-internal" {
				t.Errorf("azure flags %+v: not the values'", cfg.Azure)
			}
			// Injected hooks call --webhook-drain-host for the pod's life:
			// it must be the drain Service's fixed clusterIP and port.
			drain := typed[corev1.Service](t, find(t, objs, "Service", "zerodrop-drain"))
			if drain.Spec.ClusterIP == "" || drain.Spec.ClusterIP != cfg.Webhook.DrainHost {
				t.Errorf("drain Service clusterIP %q, --webhook-drain-host %q: want the same fixed address", drain.Spec.ClusterIP, cfg.Webhook.DrainHost)
			}
			if drain.Spec.Ports[0].Port != cfg.Webhook.DrainPort {
				t.Errorf("drain Service port %d, --webhook-drain-port %d", drain.Spec.Ports[0].Port, cfg.Webhook.DrainPort)
			}
			if !cfg.MetricsSecure || cfg.MetricsAddr != ":8443" {
				t.Errorf("metrics %q secure=%v: want :8443 with --metrics-secure", cfg.MetricsAddr, cfg.MetricsSecure)
			}
			if cfg.LeaderNamespace != namespace || cfg.LeaderID != "zerodrop-controller" {
				t.Errorf("leader election %s/%s: the Role grants %s/zerodrop-controller", cfg.LeaderNamespace, cfg.LeaderID, namespace)
			}
			checkSecurity(t, &d.Spec.Template.Spec)
			checkWorkloadIdentity(t, objs, d)

			cr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop"))
			role := typed[rbacv1.Role](t, find(t, objs, "Role", "zerodrop"))
			wantCR, wantRole := leastPrivilege, leastPrivilegeNamespaced
			if certManager {
				// cert-manager owns the certificate and the caBundle: the
				// controller needs neither the Secret nor the configuration,
				// only the drain key's Secret.
				wantCR, wantRole = leastPrivilege[:len(leastPrivilege)-1], append(slices.Clone(leastPrivilegeNamespaced[:3]), drainKeyGrant)
			}
			if d := grantDiff(cr.Rules, wantCR); d != "" {
				t.Errorf("ClusterRole zerodrop is not the least-privilege set: %s", d)
			}
			if d := grantDiff(role.Rules, wantRole); d != "" {
				t.Errorf("Role zerodrop is not the least-privilege set: %s", d)
			}
			auth := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop-metrics-auth"))
			if !rulesEqual(auth.Rules, []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			}) {
				t.Errorf("metrics-auth ClusterRole grants %v", auth.Rules)
			}
			reader := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop-metrics-reader"))
			if !rulesEqual(reader.Rules, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}) {
				t.Errorf("metrics-reader ClusterRole grants %v", reader.Rules)
			}
			checkWebhook(t, objs, d, cfg, certManager)
			if certManager {
				checkOptional(t, objs, d)
			}
		})
	}
}

func checkSecurity(t *testing.T, spec *corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want non-root 65532 with the RuntimeDefault seccomp profile", psc)
	}
	sc := spec.Containers[0].SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want a read-only root filesystem, no privilege escalation, capabilities dropped", sc)
	}
}

func checkWorkloadIdentity(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
	t.Helper()
	sa := find(t, objs, "ServiceAccount", "zerodrop")
	if sa.GetAnnotations()["azure.workload.identity/client-id"] != "00000000-0000-0000-0000-000000000000" {
		t.Errorf("ServiceAccount annotations %v: want azure.workload.identity/client-id", sa.GetAnnotations())
	}
	if d.Spec.Template.Labels["azure.workload.identity/use"] != "true" {
		t.Errorf("pod labels %v: want azure.workload.identity/use=true", d.Spec.Template.Labels)
	}
	if d.Spec.Template.Spec.ServiceAccountName != sa.GetName() {
		t.Errorf("pods run as %q, not the annotated ServiceAccount", d.Spec.Template.Spec.ServiceAccountName)
	}
}

func checkWebhook(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment, cfg controller.Config, certManager bool) {
	t.Helper()
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, find(t, objs, "MutatingWebhookConfiguration", "zerodrop"))
	if mwc.Name != cfg.Webhook.Certs.WebhookConfiguration {
		t.Errorf("webhook configuration %s, the controller keeps %s", mwc.Name, cfg.Webhook.Certs.WebhookConfiguration)
	}
	svc := mwc.Webhooks[0].ClientConfig.Service
	if svc.Name != cfg.Webhook.Certs.ServiceName || svc.Namespace != namespace || !has(objs, "Service", svc.Name) {
		t.Errorf("webhook calls %s/%s; the controller's certificate names %s", svc.Namespace, svc.Name, cfg.Webhook.Certs.ServiceName)
	}
	inject := mwc.Annotations["cert-manager.io/inject-ca-from"]
	if cfg.Webhook.ManageCerts == certManager {
		t.Errorf("--webhook-manage-certs=%v with webhook.certManager.enabled=%v", cfg.Webhook.ManageCerts, certManager)
	}
	if !certManager {
		if inject != "" || cfg.Webhook.Certs.SecretName != "zerodrop-webhook-tls" {
			t.Errorf("self-managed certificates: inject-ca-from %q, secret %q", inject, cfg.Webhook.Certs.SecretName)
		}
		return
	}
	certName := strings.TrimPrefix(inject, namespace+"/")
	cert := find(t, objs, "Certificate", certName)
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dns, svc.Name+"."+namespace+".svc") {
		t.Errorf("Certificate %s names %v, not the webhook Service", certName, dns)
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	mounted := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
			mounted = mounted || (m.Name == v.Name && m.MountPath == "/tmp/k8s-webhook-server/serving-certs")
		}
	}
	if !mounted {
		t.Errorf("the Certificate's Secret %s is not mounted at controller-runtime's webhook certificate directory", secret)
	}
}

// checkOptional: the NetworkPolicy opens the ports the pod serves, the
// ServiceMonitor selects the metrics Service's port.
func checkOptional(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
	t.Helper()
	ports := map[string]bool{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = true
	}
	np := typed[networkingv1.NetworkPolicy](t, find(t, objs, "NetworkPolicy", "zerodrop"))
	open := map[string]bool{}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if !ports[p.Port.String()] {
				t.Errorf("NetworkPolicy opens %s, which the container does not declare", p.Port.String())
			}
			open[p.Port.String()] = true
		}
	}
	for _, want := range []string{"drain", "webhook", "metrics"} {
		if !open[want] {
			t.Errorf("NetworkPolicy does not admit the %s port", want)
		}
	}
	sm := find(t, objs, "ServiceMonitor", "zerodrop")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	metricsSvc := find(t, objs, "Service", "zerodrop-metrics")
	for k, v := range sel {
		if metricsSvc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the metrics Service has %v", k, v, metricsSvc.GetLabels())
		}
	}
}

// TestPrometheusRuleMetricsExist: every zerodrop metric an alert uses is one
// the controller registers (internal/metrics).
func TestPrometheusRuleMetricsExist(t *testing.T) {
	rec := &recorder{}
	if _, err := metrics.New(rec); err != nil {
		t.Fatal(err)
	}
	out, err := template(t, "metrics.prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	rule := find(t, objs, "PrometheusRule", "zerodrop")
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	used := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			expr, _, _ := unstructured.NestedString(r.(map[string]any), "expr")
			for _, name := range regexp.MustCompile(`zerodrop_[a-z_]+`).FindAllString(expr, -1) {
				used++
				if !rec.names[name] {
					t.Errorf("alert expression %q uses %s, which internal/metrics does not register", expr, name)
				}
			}
		}
	}
	if used == 0 {
		t.Error("the PrometheusRule uses no zerodrop metric")
	}
}

// recorder is a Registerer that keeps the names of what is registered.
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	if r.names == nil {
		r.names = map[string]bool{}
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// grantDiff lists the grants rules has beyond want and lacks from it ("" when equal).
func grantDiff(rules, want []rbacv1.PolicyRule) string {
	got, exp := grants(rules), grants(want)
	var extra, missing []string
	for _, g := range got {
		if !slices.Contains(exp, g) {
			extra = append(extra, g)
		}
	}
	for _, g := range exp {
		if !slices.Contains(got, g) {
			missing = append(missing, g)
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("grants %q too many, lacks %q", extra, missing)
}

// rulesEqual compares RBAC rules as sets of (group, resource, name, verb,
// URL) grants, so that order and grouping do not matter but every grant does.
func rulesEqual(got, want []rbacv1.PolicyRule) bool {
	return slices.Equal(grants(got), grants(want))
}

func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{"*"}
		}
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out = append(out, "url "+u+" "+v)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, n := range names {
						out = append(out, strings.Join([]string{g, res, n, v}, " "))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
