package rules

import (
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// IgnoreAnnotation lists rule IDs to suppress for an object, each with a
// reason ("ZD301: single replica by design"), on a workload's or a Service's
// metadata.
const IgnoreAnnotation = "zerodrop.dev/ignore"

// workload is any object that runs pods, reduced to what the rules read.
type workload struct {
	src  manifest.Source
	kind string
	ns   string
	name string
	meta *metav1.ObjectMeta
	tmpl *corev1.PodTemplateSpec
	obj  any
}

func (w *workload) id() string { return objectID(w.kind, w.ns, w.name) }

// service is a Service of type LoadBalancer with a selector.
type service struct {
	src manifest.Source
	svc *corev1.Service
	sel labels.Selector
}

func (s *service) id() string {
	return objectID(manifest.KindService, namespace(s.svc.Namespace), s.svc.Name)
}

// ref is namespace/name, for messages that already say "Service".
func (s *service) ref() string { return namespace(s.svc.Namespace) + "/" + s.svc.Name }

// budget is a PodDisruptionBudget with its selector converted once: every
// workload of the namespace is matched against it.
type budget struct {
	pdb *policyv1.PodDisruptionBudget
	sel labels.Selector
	err error // an invalid selector selects nothing
}

// index groups the objects by namespace for matching.
type index struct {
	workloads  []*workload
	lbServices []*service
	byNS       map[string]*nsObjects
	// webhooks are the input's MutatingWebhookConfigurations: what they
	// inject into a pod is not in the manifest (injection.go).
	webhooks []*manifest.MutatingWebhookConfiguration
}

type nsObjects struct {
	services []*service
	pdbs     []*budget
	hpas     []*autoscalingv2.HorizontalPodAutoscaler
	labels   map[string]string // the Namespace object's labels, if given
	annots   map[string]string // and its annotations (Linkerd's injection is one)
}

func objectID(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// namespace applies the default an object without one gets when applied.
func namespace(ns string) string {
	if ns == "" {
		return metav1.NamespaceDefault
	}
	return ns
}

func buildIndex(objs []manifest.Object) *index {
	ix := &index{byNS: map[string]*nsObjects{}}
	ns := func(name string) *nsObjects {
		n := ix.byNS[namespace(name)]
		if n == nil {
			n = &nsObjects{}
			ix.byNS[namespace(name)] = n
		}
		return n
	}
	present := map[string]bool{}
	for _, o := range objs {
		if m := objectMeta(o.Obj); m != nil {
			present[objectID(o.Kind, namespace(m.Namespace), m.Name)] = true
		}
	}
	for _, o := range objs {
		switch obj := o.Obj.(type) {
		case *corev1.Service:
			if obj.Spec.Type != corev1.ServiceTypeLoadBalancer || len(obj.Spec.Selector) == 0 {
				continue
			}
			s := &service{src: o.Source, svc: obj, sel: labels.SelectorFromSet(obj.Spec.Selector)}
			ix.lbServices = append(ix.lbServices, s)
			ns(obj.Namespace).services = append(ns(obj.Namespace).services, s)
		case *policyv1.PodDisruptionBudget:
			b := &budget{pdb: obj}
			b.sel, b.err = metav1.LabelSelectorAsSelector(obj.Spec.Selector)
			ns(obj.Namespace).pdbs = append(ns(obj.Namespace).pdbs, b)
		case *autoscalingv2.HorizontalPodAutoscaler:
			ns(obj.Namespace).hpas = append(ns(obj.Namespace).hpas, obj)
		case *manifest.MutatingWebhookConfiguration:
			ix.webhooks = append(ix.webhooks, obj)
		case *corev1.Namespace:
			ns(obj.Name).labels = obj.Labels
			ns(obj.Name).annots = obj.Annotations
		default:
			if w := newWorkload(o); w != nil && !ownedByPresent(w, present) && !helmHook(w) {
				ix.workloads = append(ix.workloads, w)
			}
		}
	}
	return ix
}

// newWorkload returns nil for objects that do not run pods.
func newWorkload(o manifest.Object) *workload {
	w := &workload{src: o.Source, kind: o.Kind, obj: o.Obj}
	switch obj := o.Obj.(type) {
	case *appsv1.Deployment:
		w.meta, w.tmpl = &obj.ObjectMeta, &obj.Spec.Template
	case *appsv1.StatefulSet:
		w.meta, w.tmpl = &obj.ObjectMeta, &obj.Spec.Template
	case *appsv1.DaemonSet:
		w.meta, w.tmpl = &obj.ObjectMeta, &obj.Spec.Template
	case *appsv1.ReplicaSet:
		w.meta, w.tmpl = &obj.ObjectMeta, &obj.Spec.Template
	case *corev1.Pod:
		w.meta = &obj.ObjectMeta
		w.tmpl = &corev1.PodTemplateSpec{ObjectMeta: obj.ObjectMeta, Spec: obj.Spec}
	default:
		return nil
	}
	w.ns, w.name = namespace(w.meta.Namespace), w.meta.Name
	return w
}

// helmHook reports whether the object is a Helm hook (a chart's test Pod,
// a migration Job's Pod): it runs once around an install, is not part of the
// serving workload, yet often carries the labels the Service selects.
func helmHook(w *workload) bool {
	_, ok := w.meta.Annotations["helm.sh/hook"]
	return ok
}

// ownedByPresent reports whether the workload is managed by another workload
// of the input (a Deployment's ReplicaSets, their Pods): the owner is what a
// user fixes, and reporting both would repeat every finding. An owner that is
// not in the input (an Argo Rollout) does not hide the object.
func ownedByPresent(w *workload, present map[string]bool) bool {
	for _, ref := range w.meta.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && present[objectID(ref.Kind, w.ns, ref.Name)] {
			return true
		}
	}
	return false
}

func objectMeta(obj any) *metav1.ObjectMeta {
	if a, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return nil
}

// selecting returns the LoadBalancer Services whose selector matches the
// workload's pods — the template's labels and those its controller sets
// (controller_labels.go) —, in the same namespace.
func (ix *index) selecting(w *workload) []*service {
	n := ix.byNS[w.ns]
	if n == nil {
		return nil
	}
	var out []*service
	for _, s := range n.services {
		if s.selectsWorkload(w) {
			out = append(out, s)
		}
	}
	return out
}
