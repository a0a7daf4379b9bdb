package dataplane

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// The router stand-in's rule, pure: the route follows the node, not the
// pod. A load-balancer host is announced once a data-plane pod on it
// serves; its route then stays — through its pods' terminations, a
// DaemonSet update's surge or gap, a NotReady — until a signal that its
// node is leaving (nodeLeaving), or until the scenario withdraws a failed
// node's route as BFD would (Plane.Withdraw). A node whose HAProxy is gone
// without such a signal keeps its route, and what the route sends there
// fails until a pod on it serves again: the router looks at the node, and
// the node is up.

// podRoute is what the router stand-in knows of one data-plane pod.
type podRoute struct {
	host        int  // its load-balancer host's index
	viewed      bool // the lab views its HAProxy
	ready       bool // Ready, and became so after the lab's last view of it
	terminating bool
}

// nodeRoute is what the router stand-in knows of one load-balancer host's
// Node.
type nodeRoute struct {
	down    bool // failed (no kubelet, the lab's NodeDown): not announced again until it is back
	leaving bool // nodeLeaving
}

// serves: the pod is one whose HAProxy a router checking the replicas
// would announce.
func (p podRoute) serves() bool { return p.viewed && p.ready && !p.terminating }

// servingHosts are the hosts (sorted, once each) on which any pod serves,
// whose node is neither down nor leaving: two pods on one node (a surge)
// count once, and either serving is enough.
func servingHosts(pods []podRoute, nodes map[int]nodeRoute) []int {
	var out []int
	for _, p := range pods {
		if n := nodes[p.host]; p.serves() && !n.down && !n.leaving {
			out = append(out, p.host)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// nextRoute is the route the router stand-in sets, given the hosts it
// routes now: every routed host whose node is not leaving, and every
// serving host. A route with no member left stays as it is (a nexthop
// group cannot be empty): kept then says so.
func nextRoute(routed []int, pods []podRoute, nodes map[int]nodeRoute) (members []int, kept bool) {
	for _, h := range routed {
		if !nodes[h].leaving {
			members = append(members, h)
		}
	}
	members = append(members, servingHosts(pods, nodes)...)
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return slices.Clone(routed), len(routed) > 0
	}
	return members, false
}

// nodeLeaving: node (nil: deleted) gives a signal that it leaves — the
// exclusion label, the cluster autoscaler's deletion taint, its deletion —
// the signals the upstream service controller and zerodrop's node mode
// take (model.NodeExcluded). A cordon is not one (yet). labelledAtStart:
// the node carried the exclusion label when the router started, which then
// does not count — the lab labels its data-plane Nodes so from their
// registration to keep them out of node-mode backends (docs/lab.md, "data-plane
// nodes"), so only the label put on later is the signal.
func nodeLeaving(node *corev1.Node, labelledAtStart bool) bool {
	if node == nil {
		return true
	}
	if labelledAtStart {
		node = node.DeepCopy()
		delete(node.Labels, model.LabelExcludeFromLB)
	}
	return model.NodeExcluded(node)
}

// readySince: the pod is Ready, and became so at since or later.
func readySince(pod *corev1.Pod, since time.Time) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && !c.LastTransitionTime.Time.Before(since)
		}
	}
	return false
}
