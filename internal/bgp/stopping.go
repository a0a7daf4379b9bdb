package bgp

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// StopFacts is what a speaker told to stop (SIGTERM) reads to choose how it
// leaves its routes (DecideStop). Each object is read once, at the stop;
// a nil object comes with the error its read returned, and an object not
// read (not needed, or nothing to read) is nil with a nil error.
type StopFacts struct {
	// Leaving is the NodeWatcher's last answer.
	Leaving bool
	// Pod is the speaker's own Pod.
	Pod    *corev1.Pod
	PodErr error
	// Owner is the DaemonSet the Pod's controller reference names.
	Owner    *appsv1.DaemonSet
	OwnerErr error
	// Node is the speaker's Node, for the Owner's node selector.
	Node    *corev1.Node
	NodeErr error
}

// DaemonSetOwner is the name of the DaemonSet that controls pod, "" when
// none does.
func DaemonSetOwner(pod *corev1.Pod) string {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "DaemonSet" && ref.APIVersion == appsv1.SchemeGroupVersion.String() {
			return ref.Name
		}
	}
	return ""
}

// DecideStop says whether a speaker that is told to stop withdraws its
// routes (Stop: withdrawals and a Cease, the routers drop the node at once)
// or stops for a graceful restart (StopForRestart: the routers keep its
// routes, stale, for the restart time), and why.
//
// A graceful restart is right only when a successor takes over on this
// node within the restart time: the speaker's own update or a restart of
// its Pod. Otherwise the routers would keep sending new connections for the
// whole restart time to a node whose HAProxy stops too (the lab measured
// it with a node's pods killed, which closed the session as a stop does:
// requests failed for the restart time, docs/lab.md). The stops with no
// successor that the API server shows:
//   - the node leaving (NodeWatcher), as before;
//   - a Pod stopped by its kubelet and not deleted through the API server:
//     a node shutdown (the kubelet's graceful node shutdown sets the Pod's
//     status Failed and deletes nothing: killPods in Kubernetes v1.37.2's
//     pkg/kubelet/nodeshutdown; without it, the system's SIGTERM to every
//     process at a reboot) or a node-pressure eviction. The speaker's
//     update (the DaemonSet controller deletes the old Pod), `kubectl
//     delete pod` and an eviction through the API all delete the Pod
//     first: its deletionTimestamp is set before the kubelet sends SIGTERM;
//   - a Pod deleted while its DaemonSet is gone or being deleted (the
//     chart uninstalled), or whose DaemonSet no longer selects this node
//     by its node selector (a node label removed). Node affinity and
//     taints are not evaluated: such a node keeps the graceful restart.
//
// Whatever could not be read leaves the graceful restart, the speaker's
// behaviour before this rule: an API outage at the stop must not turn an
// update into a withdrawal (the router would move the node's connections).
func DecideStop(f StopFacts) (withdraw bool, why string) {
	if f.Leaving {
		return true, "the node is leaving"
	}
	switch {
	case apierrors.IsNotFound(f.PodErr):
		// Deleted with no grace period: whoever did it usually lets the
		// DaemonSet replace it, and its owner can no longer be read.
		return false, "its Pod is gone (deleted at once)"
	case f.PodErr != nil:
		return false, fmt.Sprintf("its Pod could not be read (%v)", f.PodErr)
	case f.Pod == nil:
		return false, "its Pod is not known (no --pod-name)"
	case f.Pod.DeletionTimestamp == nil:
		return true, "its kubelet stops it without its Pod being deleted (a node shutdown or an eviction): no successor on this node"
	}
	ds := DaemonSetOwner(f.Pod)
	switch {
	case ds == "":
		return true, "its Pod is deleted and no DaemonSet replaces it"
	case apierrors.IsNotFound(f.OwnerErr):
		return true, fmt.Sprintf("its Pod is deleted and its DaemonSet %s is gone", ds)
	case f.OwnerErr != nil:
		return false, fmt.Sprintf("its Pod is deleted; its DaemonSet %s could not be read (%v)", ds, f.OwnerErr)
	case f.Owner == nil:
		return false, fmt.Sprintf("its Pod is deleted; its DaemonSet %s was not read", ds)
	case f.Owner.DeletionTimestamp != nil:
		return true, fmt.Sprintf("its Pod is deleted and its DaemonSet %s is being deleted", ds)
	}
	if sel := f.Owner.Spec.Template.Spec.NodeSelector; len(sel) > 0 && f.Node != nil && f.NodeErr == nil &&
		!labels.SelectorFromSet(sel).Matches(labels.Set(f.Node.Labels)) {
		return true, fmt.Sprintf("its Pod is deleted and its DaemonSet %s no longer selects this node", ds)
	}
	return false, fmt.Sprintf("its Pod is deleted and its DaemonSet %s replaces it (an update or a restart)", ds)
}

// ReadStopFacts reads what DecideStop needs, each object once and only when
// the decision depends on it: the speaker's Pod (namespace/pod; not read
// when pod is empty or the node is leaving), then, once the Pod shows it is
// deleted, the DaemonSet that controls it, then, when that DaemonSet has a
// node selector, the Node called node. ctx bounds the reads: the caller
// gives them part of the Pod's termination grace period.
func ReadStopFacts(ctx context.Context, c kubernetes.Interface, namespace, pod, node string, leaving bool) StopFacts {
	f := StopFacts{Leaving: leaving}
	if leaving || pod == "" {
		return f
	}
	// A typed client returns an empty object beside an error: kept nil.
	p, err := c.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		f.PodErr = err
		return f
	}
	f.Pod = p
	ds := DaemonSetOwner(f.Pod)
	if f.Pod.DeletionTimestamp == nil || ds == "" {
		return f
	}
	d, err := c.AppsV1().DaemonSets(namespace).Get(ctx, ds, metav1.GetOptions{})
	if err != nil {
		f.OwnerErr = err
		return f
	}
	f.Owner = d
	if len(f.Owner.Spec.Template.Spec.NodeSelector) == 0 || node == "" {
		return f
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.NodeErr = err
		return f
	}
	f.Node = n
	return f
}
