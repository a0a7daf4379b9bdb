package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// syncStatus patches the pod's status when what the kubelet would report
// differs from what the pod shows. Ready is the containers' readiness and
// every readiness gate's condition (the gate conditions belong to their
// controllers; the strategic merge patch keys conditions by type and leaves
// them alone).
func (a *Agent) syncStatus(ctx context.Context, pod *corev1.Pod, rt *podRuntime) error {
	ready, finished, code := rt.status()
	statuses, allReady := containerStatuses(pod, rt, ready, finished, code)
	gates := true
	for _, g := range pod.Spec.ReadinessGates {
		gates = gates && ConditionStatus(pod, g.ConditionType) == corev1.ConditionTrue
	}
	podReady := allReady && gates
	phase := corev1.PodRunning
	if !finished.IsZero() {
		phase = corev1.PodSucceeded
		if code != 0 {
			phase = corev1.PodFailed
		}
	}
	readyReason := ""
	switch {
	case !allReady:
		readyReason = "ContainersNotReady"
	case !gates:
		readyReason = "ReadinessGatesNotReady"
	}
	conds := []corev1.PodCondition{
		a.condition(pod, corev1.PodScheduled, true, ""),
		a.condition(pod, corev1.PodInitialized, true, ""),
		a.condition(pod, corev1.ContainersReady, allReady, "ContainersNotReady"),
		a.condition(pod, corev1.PodReady, podReady, readyReason),
	}
	if statusReported(pod, phase, rt.ip.String(), conds, statuses) {
		return nil
	}
	hostIP := rt.env.hostIP
	patch := map[string]any{"status": map[string]any{
		"phase":             phase,
		"hostIP":            hostIP,
		"hostIPs":           []corev1.HostIP{{IP: hostIP}},
		"podIP":             rt.ip.String(),
		"podIPs":            []corev1.PodIP{{IP: rt.ip.String()}},
		"startTime":         metav1.NewTime(rt.startedAt),
		"conditions":        conds,
		"containerStatuses": statuses,
	}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err == nil && ConditionStatus(pod, corev1.PodReady) != conds[3].Status {
		a.logf("pod %s/%s Ready=%s", pod.Namespace, pod.Name, conds[3].Status)
	}
	return err
}

// containerStatuses are the pod's containers as the kubelet reports them
// (a container between restarts waits in CrashLoopBackOff), and whether
// every one is ready.
func containerStatuses(pod *corev1.Pod, rt *podRuntime, ready map[string]bool, finished time.Time, code int32) ([]corev1.ContainerStatus, bool) {
	allReady := len(pod.Spec.Containers) > 0
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		st := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "lab://" + c.Image,
			ContainerID: fmt.Sprintf("lab://%s/%s", rt.uid, c.Name), Ready: ready[c.Name], Started: ptr.To(finished.IsZero()),
			RestartCount: rt.restartCount(c.Name),
		}
		if finished.IsZero() && !rt.running(c.Name) {
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
			st.Started = ptr.To(false)
		} else if finished.IsZero() {
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(rt.startedAt)}
		} else {
			reason := "Completed"
			if code != 0 {
				reason = "Error"
			}
			st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
				StartedAt: metav1.NewTime(rt.startedAt), FinishedAt: metav1.NewTime(finished)}
		}
		allReady = allReady && st.Ready
		statuses = append(statuses, st)
	}
	return statuses, allReady
}

// statusReported: the pod already shows the phase, address, conditions and
// container states (readiness, termination, restarts) the kubelet would
// report, so syncStatus sends no patch.
func statusReported(pod *corev1.Pod, phase corev1.PodPhase, ip string, conds []corev1.PodCondition, statuses []corev1.ContainerStatus) bool {
	same := pod.Status.Phase == phase && pod.Status.PodIP == ip && len(pod.Status.ContainerStatuses) == len(statuses)
	for _, c := range conds {
		same = same && ConditionStatus(pod, c.Type) == c.Status
	}
	for i := range statuses {
		if !same {
			break
		}
		cur := pod.Status.ContainerStatuses[i]
		same = cur.Ready == statuses[i].Ready && (cur.State.Terminated == nil) == (statuses[i].State.Terminated == nil) &&
			cur.RestartCount == statuses[i].RestartCount
	}
	return same
}

// condition keeps the transition time of a condition whose status stays.
func (a *Agent) condition(pod *corev1.Pod, typ corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	st := corev1.ConditionFalse
	if ok {
		st, reason = corev1.ConditionTrue, ""
	}
	c := corev1.PodCondition{Type: typ, Status: st, Reason: reason, LastTransitionTime: metav1.Now()}
	for _, cur := range pod.Status.Conditions {
		if cur.Type == typ && cur.Status == st {
			c.LastTransitionTime = cur.LastTransitionTime
		}
	}
	return c
}

func ConditionStatus(pod *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// ProcessKey names the process container runs in p now: the pod's UID and
// the container's restarts (the lab's kubelet starts a container again in
// place, and its new process counts from zero).
func ProcessKey(p *corev1.Pod, container string) string {
	return fmt.Sprintf("%s/%d", p.UID, ContainerRestarts(p, container))
}

// ContainerRestartsOf is the restart count of container name of the pod
// key (namespace/name), from the agent's cache (0: not there).
func (a *Agent) ContainerRestartsOf(key, name string) int32 {
	ns, pod, _ := strings.Cut(key, "/")
	p, err := a.Pods.Pods(ns).Get(pod)
	if err != nil {
		return 0
	}
	return ContainerRestarts(p, name)
}

// ContainerRestarts is the restart count of container name of p, by its
// status.
func ContainerRestarts(p *corev1.Pod, name string) int32 {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == name {
			return st.RestartCount
		}
	}
	return 0
}
