package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// fits reports whether the scheduler may put pod on node, as the
// scheduler's filters that matter in the lab decide: the node is
// schedulable, matches the pod's nodeSelector and required node affinity
// (matchExpressions on labels and matchFields on metadata.name, which the
// DaemonSet controller sets for each of its pods), and has no NoSchedule or
// NoExecute taint the pod does not tolerate. When it does not fit, reason
// says why.
func fits(pod *corev1.Pod, node *corev1.Node) (ok bool, reason string) {
	unschedulable := &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, unschedulable, false) {
		return false, "unschedulable"
	}
	match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return false, fmt.Sprintf("node affinity: %v", err)
	}
	if !match {
		return false, "node selector or affinity does not match"
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	if untolerated {
		return false, fmt.Sprintf("untolerated taint %s", taint.ToString())
	}
	return true, ""
}

// bind schedules a pod on the node with the fewest pods of its namespace
// among those it fits (schedule.go; a spreading scheduler), through the
// pods/binding subresource. A pod no node fits stays Pending, its
// PodScheduled condition False with the reasons, and is tried again (the
// queue's backoff) until one does.
func (a *Agent) bind(ctx context.Context, pod *corev1.Pod) error {
	a.bindMu.Lock()
	defer a.bindMu.Unlock()
	everywhere, err := a.Pods.List(labels.Everything())
	if err != nil {
		return err
	}
	a.mu.Lock()
	onNode := map[string][]*corev1.Pod{}
	for _, p := range everywhere {
		if node := a.nodeOf(p); node != "" {
			onNode[node] = append(onNode[node], p)
		}
	}
	a.mu.Unlock()
	count := map[string]int{}
	var candidates, refused []string
	for _, n := range a.nodes {
		node, err := a.nodeLs.Get(n)
		if err != nil {
			continue
		}
		ok, why := fits(pod, node)
		if ok {
			ok, why = portsFree(pod, onNode[n])
		}
		if !ok {
			refused = append(refused, n+": "+why)
			continue
		}
		candidates = append(candidates, n)
		count[n] = 0
	}
	if len(candidates) == 0 {
		msg := fmt.Sprintf("0/%d nodes are available: %s", len(a.nodes), strings.Join(refused, "; "))
		if err := a.markUnschedulable(ctx, pod, msg); err != nil {
			a.logf("agent: pod %s/%s: report it unschedulable: %v", pod.Namespace, pod.Name, err)
		}
		return fmt.Errorf("no node fits %s/%s (%s)", pod.Namespace, pod.Name, strings.Join(refused, "; "))
	}
	all, err := a.Pods.Pods(pod.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	a.mu.Lock()
	for _, p := range all {
		if p.DeletionTimestamp != nil {
			continue
		}
		node := a.nodeOf(p)
		if _, ok := count[node]; ok {
			count[node]++
		}
	}
	a.mu.Unlock()
	target := slices.MinFunc(candidates, func(x, y string) int { return count[x] - count[y] })
	err = a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: target},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	a.mu.Lock()
	a.boundTo[pod.Namespace+"/"+pod.Name] = target
	a.mu.Unlock()
	return nil
}

// nodeOf is the node p is bound to, or was just bound to by this agent
// before its informer shows it; "" for a pod not bound. a.mu is held.
func (a *Agent) nodeOf(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	return a.boundTo[p.Namespace+"/"+p.Name]
}

// markUnschedulable sets the pod's PodScheduled condition False, reason
// Unschedulable, with msg, as kube-scheduler reports a pod no node fits;
// nothing is written when the pod already says so.
func (a *Agent) markUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
			c.Reason == corev1.PodReasonUnschedulable && c.Message == msg {
			return nil
		}
	}
	cond := a.condition(pod, corev1.PodScheduled, false, corev1.PodReasonUnschedulable)
	cond.Message = msg
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
