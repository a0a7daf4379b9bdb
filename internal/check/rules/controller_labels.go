package rules

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// Labels a workload's controller sets on every pod it creates, beyond the
// pod template's (issue 54): a Service may select a workload's pods by them,
// so they are not "selects nothing" (ZD403). Their values are known only in
// part from a manifest:
//
//   - StatefulSet (pkg/controller/statefulset/stateful_set_utils.go,
//     initIdentity and updateIdentity): statefulset.kubernetes.io/pod-name is
//     "<name>-<ordinal>" and apps.kubernetes.io/pod-index "<ordinal>" (since
//     Kubernetes 1.28), the ordinal counting from spec.ordinals.start (0 by
//     default) — a per-pod Service selects one of them. Any ordinal from the
//     start on is accepted: a HorizontalPodAutoscaler or kubectl scale may
//     change the replica count the manifest gives.
//   - StatefulSet and DaemonSet: controller-revision-hash, the hash of the
//     current ControllerRevision (unknown here: any value).
//   - DaemonSet: pod-template-generation, the DaemonSet's generation (any
//     value).
//   - Deployment: pod-template-hash, which the Deployment controller adds to
//     each ReplicaSet's template and selector (any value; a ReplicaSet read
//     back from a cluster carries it in its template already).
//
// Job labels (job-name, controller-uid, batch.kubernetes.io/…) would belong
// here too, but Jobs are not a kind the analyzer reads.
const (
	statefulSetPodNameLabel = "statefulset.kubernetes.io/pod-name"
	podIndexLabel           = "apps.kubernetes.io/pod-index"
	controllerRevisionLabel = "controller-revision-hash"
	podTemplateGenLabel     = "pod-template-generation"
	deploymentPodHashLabel  = "pod-template-hash"
)

// controllerLabelMatches reports whether the workload's controller sets the
// label key on its pods (set) and, if so, whether value is one it may set
// (ok).
func controllerLabelMatches(w *workload, key, value string) (set, ok bool) {
	switch {
	case w.kind == manifest.KindStatefulSet && (key == statefulSetPodNameLabel || key == podIndexLabel):
		ord := value
		if key == statefulSetPodNameLabel {
			rest, found := strings.CutPrefix(value, w.name+"-")
			if !found {
				return true, false
			}
			ord = rest
		}
		n, err := strconv.Atoi(ord)
		if err != nil || n < 0 || strconv.Itoa(n) != ord {
			return true, false // not an ordinal: "01", "x", "-1"
		}
		return true, n >= statefulSetStart(w)
	case key == controllerRevisionLabel && (w.kind == manifest.KindStatefulSet || w.kind == manifest.KindDaemonSet),
		key == podTemplateGenLabel && w.kind == manifest.KindDaemonSet,
		key == deploymentPodHashLabel && w.kind == manifest.KindDeployment:
		return true, value != ""
	}
	return false, false
}

func statefulSetStart(w *workload) int {
	if ss, ok := w.obj.(*appsv1.StatefulSet); ok && ss.Spec.Ordinals != nil {
		return int(ss.Spec.Ordinals.Start)
	}
	return 0
}

// selectsWorkload reports whether the Service's selector matches the pods
// of the workload: the pod template's labels, and those the controller sets
// (which take precedence, as the controller writes them last).
func (s *service) selectsWorkload(w *workload) bool {
	for k, v := range s.svc.Spec.Selector {
		if set, ok := controllerLabelMatches(w, k, v); set {
			if !ok {
				return false
			}
			continue
		}
		if got, has := w.tmpl.Labels[k]; !has || got != v {
			return false
		}
	}
	return true
}
