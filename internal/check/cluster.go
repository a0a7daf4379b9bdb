package check

import (
	"context"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	autoscalingv2client "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// clusterOptions select the kubeconfig context and namespaces for --cluster.
type clusterOptions struct {
	kubeconfig string
	context    string
	namespaces []string
	all        bool
}

// listPageSize keeps each list response small on large clusters.
const listPageSize = 500

// loadCluster lists the objects the rules read, with list calls only. Missing
// workloads or Services make the result meaningless and fail the command;
// PodDisruptionBudgets, HorizontalPodAutoscalers and Namespaces only refine
// findings, so failing to read them (RBAC) is a warning.
func loadCluster(ctx context.Context, o clusterOptions) ([]manifest.Object, []string, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		loading.ExplicitPath = o.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	namespaces := o.namespaces
	switch {
	case o.all:
		namespaces = []string{metav1.NamespaceAll}
	case len(namespaces) == 0:
		ns, _, err := cc.Namespace()
		if err != nil {
			return nil, nil, fmt.Errorf("namespace of the kubeconfig context: %w", err)
		}
		namespaces = []string{ns}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "zerodrop-check"
	cfg.QPS, cfg.Burst = 50, 100

	c, err := newClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	var (
		objs     []manifest.Object
		warnings []string
	)
	for _, ns := range namespaces {
		for _, l := range c.listers(ns, o.all) {
			got, err := l.list(ctx)
			if err != nil {
				where := "namespace " + ns
				if ns == metav1.NamespaceAll {
					where = "all namespaces"
				}
				err = fmt.Errorf("list %s in %s: %w", l.resource, where, err)
				if l.required {
					return nil, warnings, err
				}
				warnings = append(warnings, err.Error()+" (findings that depend on them may be wrong)")
				continue
			}
			objs = append(objs, got...)
		}
	}
	return objs, warnings, nil
}

type clients struct {
	core        corev1client.CoreV1Interface
	apps        appsv1client.AppsV1Interface
	policy      policyv1client.PolicyV1Interface
	autoscaling autoscalingv2client.AutoscalingV2Interface
}

func newClients(cfg *rest.Config) (*clients, error) {
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	apps, err := appsv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("apps/v1 client: %w", err)
	}
	policy, err := policyv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("policy/v1 client: %w", err)
	}
	as, err := autoscalingv2client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("autoscaling/v2 client: %w", err)
	}
	return &clients{core: core, apps: apps, policy: policy, autoscaling: as}, nil
}

// lister lists one resource of one namespace, page by page.
type lister struct {
	resource string
	required bool
	list     func(context.Context) ([]manifest.Object, error)
}

func (c *clients) listers(ns string, all bool) []lister {
	return []lister{
		{"deployments", true, pages(ns, "apis/apps/v1", "deployments", manifest.KindDeployment, c.apps.Deployments(ns).List)},
		{"statefulsets", true, pages(ns, "apis/apps/v1", "statefulsets", manifest.KindStatefulSet, c.apps.StatefulSets(ns).List)},
		{"daemonsets", true, pages(ns, "apis/apps/v1", "daemonsets", manifest.KindDaemonSet, c.apps.DaemonSets(ns).List)},
		{"replicasets", true, pages(ns, "apis/apps/v1", "replicasets", manifest.KindReplicaSet, c.apps.ReplicaSets(ns).List)},
		{"pods", true, pages(ns, "api/v1", "pods", manifest.KindPod, c.core.Pods(ns).List)},
		{"services", true, pages(ns, "api/v1", "services", manifest.KindService, c.core.Services(ns).List)},
		{"poddisruptionbudgets", false, pages(ns, "apis/policy/v1", "poddisruptionbudgets", manifest.KindPDB, c.policy.PodDisruptionBudgets(ns).List)},
		{"horizontalpodautoscalers", false, pages(ns, "apis/autoscaling/v2", "horizontalpodautoscalers", manifest.KindHPA, c.autoscaling.HorizontalPodAutoscalers(ns).List)},
		{"namespaces", false, c.namespaceLister(ns, all)},
	}
}

// namespaceLister reads the Namespace objects for their injection labels:
// all of them, or the one being read (a list with a field selector, so that
// the command never needs more than list permission).
func (c *clients) namespaceLister(ns string, all bool) func(context.Context) ([]manifest.Object, error) {
	list := c.core.Namespaces().List
	if !all {
		list = func(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error) {
			opts.FieldSelector = "metadata.name=" + ns
			return c.core.Namespaces().List(ctx, opts)
		}
	}
	return pages("", "api/v1", "namespaces", manifest.KindNamespace, list)
}

// pages lists every page of a resource and turns each item into a manifest
// object whose source is the object's API path: there is no file.
func pages[L runtime.Object](ns, apiPrefix, resource, kind string,
	list func(context.Context, metav1.ListOptions) (L, error),
) func(context.Context) ([]manifest.Object, error) {
	return func(ctx context.Context) ([]manifest.Object, error) {
		var out []manifest.Object
		opts := metav1.ListOptions{Limit: listPageSize}
		for {
			l, err := list(ctx, opts)
			if err != nil {
				return nil, err
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return nil, fmt.Errorf("read %s list: %w", resource, err)
			}
			for _, it := range items {
				m, err := meta.Accessor(it)
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", resource, err)
				}
				p := path.Join(apiPrefix, "namespaces", m.GetNamespace(), resource, m.GetName())
				if kind == manifest.KindNamespace {
					p = path.Join(apiPrefix, resource, m.GetName())
				}
				out = append(out, manifest.Object{Source: manifest.Source{File: p, Cluster: true}, Kind: kind, Obj: it})
			}
			lm, err := meta.ListAccessor(l)
			if err != nil || lm.GetContinue() == "" {
				return out, nil
			}
			opts.Continue = lm.GetContinue()
		}
	}
}
