package check_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	autoscalingv2client "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check"
	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/controlplane"
)

// writeKubeconfig writes a kubeconfig for cfg whose only context, "envtest",
// defaults to namespace ns.
func writeKubeconfig(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: ns}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterClients are the typed clients the test creates objects with.
type clusterClients struct {
	core   corev1client.CoreV1Interface
	apps   appsv1client.AppsV1Interface
	policy policyv1client.PolicyV1Interface
	as     autoscalingv2client.AutoscalingV2Interface
}

func newClusterClients(t *testing.T, cfg *rest.Config) *clusterClients {
	t.Helper()
	c := &clusterClients{
		core: corev1client.NewForConfigOrDie(cfg), apps: appsv1client.NewForConfigOrDie(cfg),
		policy: policyv1client.NewForConfigOrDie(cfg), as: autoscalingv2client.NewForConfigOrDie(cfg),
	}
	return c
}

// create creates one decoded manifest object in the cluster.
func (c *clusterClients) create(ctx context.Context, obj any) error {
	opts := metav1.CreateOptions{}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.core.Namespaces().Create(ctx, o, opts)
	case *corev1.Service:
		_, err = c.core.Services(ns(o.Namespace)).Create(ctx, o, opts)
	case *corev1.Pod:
		_, err = c.core.Pods(ns(o.Namespace)).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = c.apps.Deployments(ns(o.Namespace)).Create(ctx, o, opts)
	case *appsv1.StatefulSet:
		_, err = c.apps.StatefulSets(ns(o.Namespace)).Create(ctx, o, opts)
	case *appsv1.DaemonSet:
		_, err = c.apps.DaemonSets(ns(o.Namespace)).Create(ctx, o, opts)
	case *appsv1.ReplicaSet:
		_, err = c.apps.ReplicaSets(ns(o.Namespace)).Create(ctx, o, opts)
	case *policyv1.PodDisruptionBudget:
		_, err = c.policy.PodDisruptionBudgets(ns(o.Namespace)).Create(ctx, o, opts)
	case *autoscalingv2.HorizontalPodAutoscaler:
		_, err = c.as.HorizontalPodAutoscalers(ns(o.Namespace)).Create(ctx, o, opts)
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return err
}

func ns(n string) string {
	if n == "" {
		return metav1.NamespaceDefault
	}
	return n
}

// applyFile creates every object of a manifest file, namespaces first.
func (c *clusterClients) applyFile(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := manifest.Parse(path, data)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	slices.SortStableFunc(objs, func(a, b manifest.Object) int {
		return boolInt(b.Kind == manifest.KindNamespace) - boolInt(a.Kind == manifest.KindNamespace)
	})
	for _, o := range objs {
		if err := c.create(ctx, o.Obj); err != nil {
			t.Fatalf("create %s from %s: %v", o.Kind, o.Source, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ruleSet is "object rule container" per finding, ignoring file and message
// (messages say "unset, default 1" where the server wrote the 1 itself).
func ruleSet(t *testing.T, out string) []string {
	t.Helper()
	var s []string
	for _, f := range decodeFindings(t, out) {
		s = append(s, fmt.Sprintf("%s %s %s", f["object"], f["rule"], f["container"]))
	}
	slices.Sort(s)
	return s
}

// TestClusterMode runs --cluster against a real kube-apiserver.
func TestClusterMode(t *testing.T) {
	if testing.Short() {
		// -short (make unit) runs pure tests only.
		t.Skip("starts kube-apiserver and etcd; not under -short")
	}
	cfg := controlplane.Start(t)
	ctx := context.Background()
	c := newClusterClients(t, cfg)
	kubeconfig := writeKubeconfig(t, cfg, "shop")

	// No controller-manager creates the default ServiceAccount that pod
	// admission looks up.
	if _, err := c.core.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	c.applyFile(t, ctx, findings)
	c.applyFile(t, ctx, "testdata/realistic/podinfo-kustomize.yaml")

	t.Run("same findings as the manifests, with server-side defaults", func(t *testing.T) {
		// The API server defaulted every object on create (replicas,
		// strategy, grace period, probe timings, targetPort); the rules
		// must reach the same verdicts as with the manifests' unset fields.
		for _, provider := range []string{"generic", "aws"} {
			want := ruleSet(t, run(t, "", "-o", "json", "--provider", provider, findings, "testdata/realistic/podinfo-kustomize.yaml").stdout)
			r := run(t, "", "--cluster", "--kubeconfig", kubeconfig, "-A", "-o", "json", "--provider", provider)
			if r.code != check.ExitFindings || r.stderr != "" {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			if got := ruleSet(t, r.stdout); !slices.Equal(got, want) {
				t.Errorf("provider %s, cluster findings:\n%q\nmanifest findings:\n%q", provider, got, want)
			}
		}
	})

	t.Run("the file is the object's API path", func(t *testing.T) {
		r := run(t, "", "--cluster", "--kubeconfig", kubeconfig, "--context", "envtest", "-n", "podinfo", "-o", "json")
		fs := decodeFindings(t, r.stdout)
		if len(fs) == 0 {
			t.Fatalf("no findings; stderr %s", r.stderr)
		}
		for _, f := range fs {
			if f["object"] != "Deployment/podinfo/podinfo" || f["file"] != "apis/apps/v1/namespaces/podinfo/deployments/podinfo" {
				t.Errorf("finding on %s in %s", f["object"], f["file"])
			}
		}
	})

	t.Run("namespace from the context, -n and -A", func(t *testing.T) {
		count := func(args ...string) map[string]bool {
			r := run(t, "", append([]string{"--cluster", "--kubeconfig", kubeconfig, "-o", "json"}, args...)...)
			if r.stderr != "" {
				t.Fatalf("stderr: %s", r.stderr)
			}
			nss := map[string]bool{}
			for _, f := range decodeFindings(t, r.stdout) {
				var kind, n, name string
				fmt.Sscanf(replaceSlashes(f["object"].(string)), "%s %s %s", &kind, &n, &name)
				nss[n] = true
			}
			return nss
		}
		if got := count(); len(got) != 1 || !got["shop"] {
			t.Errorf("context namespace: findings in %v, want shop only", got)
		}
		if got := count("-n", "podinfo", "--namespace", "default"); len(got) != 2 || !got["podinfo"] || !got["default"] {
			t.Errorf("-n podinfo -n default: findings in %v", got)
		}
		if got := count("--all-namespaces"); len(got) != 3 {
			t.Errorf("-A: findings in %v", got)
		}
	})

	t.Run("owned objects and injected namespaces", func(t *testing.T) {
		if err := c.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: "injected", Labels: map[string]string{"zerodrop.dev/inject": "enabled"},
		}}); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "cart"}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "injected"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "cart", Image: "cart:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
					}}},
				},
			},
		}
		created, err := c.apps.Deployments("injected").Create(ctx, dep, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The ReplicaSet a Deployment controller would create: same pods,
		// owned by the Deployment, so not reported twice.
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "cart-7d9f", Namespace: "injected", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: "cart", UID: created.UID, Controller: ptr.To(true),
			}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: dep.Spec.Selector, Template: dep.Spec.Template},
		}
		for _, o := range []any{rs,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "injected"}, Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "injected"}, Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			}},
		} {
			if err := c.create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		// The injected readiness gate and drain hook satisfy ZD103, ZD104
		// and ZD201; with azure's 15 s deregistration, the default 30 s
		// grace period exceeds the drain hook's wait.
		r := run(t, "", "--cluster", "--kubeconfig", kubeconfig, "-n", "injected", "--provider", "azure")
		if r.code != check.ExitOK || r.stderr != "" {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if want := "zerodrop check: no findings (1 workload selected by 1 LoadBalancer Service, provider azure)\n"; r.stdout != want {
			t.Errorf("got %q, want %q", r.stdout, want)
		}
	})

	t.Run("unknown context", func(t *testing.T) {
		r := run(t, "", "--cluster", "--kubeconfig", kubeconfig, "--context", "prod")
		if r.code != check.ExitUsage || r.stderr == "" {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

func replaceSlashes(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '/' {
			b[i] = ' '
		}
	}
	return string(b)
}
