package dataplane

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestNextRoute: the route follows the node, not the pod. A host is
// announced once a pod on it serves (viewed, Ready, not terminating) on a
// node neither down nor leaving; a routed host stays while its pods
// terminate, are replaced (one pod, two during a surge, none in a gap) or
// turn NotReady, and while its node is down (the scenario withdraws a
// failed node, as BFD would); it is withdrawn when its node leaves. An
// empty route stays as it was.
func TestNextRoute(t *testing.T) {
	serving := func(host int) podRoute { return podRoute{host: host, viewed: true, ready: true} }
	up := map[int]nodeRoute{0: {}, 1: {}, 2: {}}
	with := func(host int, n nodeRoute) map[int]nodeRoute {
		m := map[int]nodeRoute{0: {}, 1: {}, 2: {}}
		m[host] = n
		return m
	}
	for _, tc := range []struct {
		name   string
		routed []int
		pods   []podRoute
		nodes  map[int]nodeRoute
		want   []int
		kept   bool
	}{
		{"every host serves", nil, []podRoute{serving(0), serving(1), serving(2)}, up, []int{0, 1, 2}, false},
		{"a host whose pod is not Ready yet is not announced", []int{0}, []podRoute{serving(0), {host: 1, viewed: true}}, up, []int{0}, false},
		{"a host whose pod the lab does not view yet is not announced", []int{0}, []podRoute{serving(0), {host: 1, ready: true}}, up, []int{0}, false},
		{"a terminating pod's host stays routed", []int{0, 1}, []podRoute{serving(0), {host: 1, viewed: true, ready: true, terminating: true}}, up, []int{0, 1}, false},
		{"a terminating pod alone does not announce its host", []int{0}, []podRoute{serving(0), {host: 1, viewed: true, ready: true, terminating: true}}, up, []int{0}, false},
		{"a surge: the old pod terminating, the new one not Ready: the host stays", []int{0, 1},
			[]podRoute{serving(0), {host: 1, viewed: true, ready: true, terminating: true}, {host: 1, viewed: true}}, up, []int{0, 1}, false},
		{"a surge: either pod serving announces the host, once", []int{0},
			[]podRoute{serving(0), {host: 1, viewed: true, ready: true, terminating: true}, serving(1)}, up, []int{0, 1}, false},
		{"two serving pods on one host count once", nil, []podRoute{serving(1), serving(1)}, up, []int{1}, false},
		{"a gap (no pod on the host) keeps its route", []int{0, 1}, []podRoute{serving(0)}, up, []int{0, 1}, false},
		{"a NotReady pod keeps its host's route", []int{0, 1}, []podRoute{serving(0), {host: 1, viewed: true}}, up, []int{0, 1}, false},
		{"a leaving node's route is withdrawn, its pod serving", []int{0, 1}, []podRoute{serving(0), serving(1)}, with(1, nodeRoute{leaving: true}), []int{0}, false},
		{"a leaving node is not announced", []int{0}, []podRoute{serving(0), serving(1)}, with(1, nodeRoute{leaving: true}), []int{0}, false},
		{"a down node stays until the scenario withdraws it", []int{0, 1}, []podRoute{serving(0), serving(1)}, with(1, nodeRoute{down: true}), []int{0, 1}, false},
		{"a down node withdrawn is not announced again", []int{0}, []podRoute{serving(0), serving(1)}, with(1, nodeRoute{down: true}), []int{0}, false},
		{"the last routed node leaving: the route stays", []int{1}, []podRoute{serving(1)}, with(1, nodeRoute{leaving: true}), []int{1}, true},
		{"nothing routed, nothing serving", nil, nil, up, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, kept := nextRoute(tc.routed, tc.pods, tc.nodes)
			if !slices.Equal(got, tc.want) || kept != tc.kept {
				t.Errorf("nextRoute(%v) = %v (kept %v), want %v (kept %v)", tc.routed, got, kept, tc.want, tc.kept)
			}
		})
	}
}

// TestNodeLeaving: the exclusion label put on, the autoscaler's deletion
// taint, the Node's deletion or its absence are signals that a node
// leaves; a cordon, NotReady and the data-plane taint are not; the label a
// node carried from the router's start is not one.
func TestNodeLeaving(t *testing.T) {
	now := metav1.Now()
	node := func(f func(n *corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lab-lb-1", Labels: map[string]string{}}}
		f(n)
		return n
	}
	labelled := node(func(n *corev1.Node) { n.Labels[model.LabelExcludeFromLB] = "true" })
	for _, tc := range []struct {
		name            string
		node            *corev1.Node
		labelledAtStart bool
		want            bool
	}{
		{"a plain node", node(func(*corev1.Node) {}), false, false},
		{"cordoned", node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), false, false},
		{"NotReady", node(func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}), false, false},
		{"the data-plane taint", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "zerodrop.dev/data-plane", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}), false, false},
		{"the exclusion label put on", labelled, false, true},
		{"the exclusion label it carried from the start", labelled, true, false},
		{"the autoscaler's deletion taint", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: model.TaintToBeDeletedByClusterAutoscaler, Value: "1", Effect: corev1.TaintEffectNoSchedule}}
		}), false, true},
		{"the taint on a node labelled from the start", node(func(n *corev1.Node) {
			n.Labels[model.LabelExcludeFromLB] = "true"
			n.Spec.Taints = []corev1.Taint{{Key: model.TaintToBeDeletedByClusterAutoscaler, Value: "1", Effect: corev1.TaintEffectNoSchedule}}
		}), true, true},
		{"being deleted", node(func(n *corev1.Node) { n.DeletionTimestamp = &now }), false, true},
		{"deleted", nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeLeaving(tc.node, tc.labelledAtStart); got != tc.want {
				t.Errorf("nodeLeaving = %v, want %v", got, tc.want)
			}
		})
	}
	if _, ok := labelled.Labels[model.LabelExcludeFromLB]; !ok {
		t.Error("nodeLeaving took the label off the Node it was given (the informer's copy)")
	}
}
