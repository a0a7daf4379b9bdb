package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/model"
)

// registerNode creates (or adopts) a lab Node with its node namespace's IP
// and pod CIDR and posts a Ready status and Lease, as the kubelet does.
func (a *Agent) registerNode(ctx context.Context, name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "lab",
		}},
	}
	var ip string
	if h := a.hostNodes[name]; h != nil {
		// A data-plane node: host-network pods only (no pod CIDR, no
		// kube-proxy), labelled for the chart's DaemonSet, tainted so that
		// nothing else lands there, and not a load balancer backend.
		ip = h.IP.String()
		node.Labels[dataPlaneNodeLabel] = "true"
		node.Labels[model.LabelExcludeFromLB] = "true"
		node.Spec.Taints = []corev1.Taint{DataPlaneTaint}
	} else {
		nn := a.net.nodeFor(name)
		ip = nn.IP.String()
		cidr := nn.PodCIDR.String()
		node.Spec = corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}
	}
	created, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", name, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	status := corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "lab node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.2-lab", OperatingSystem: "linux", Architecture: "amd64", ContainerRuntimeVersion: "lab://1"},
	}
	// Node controllers of kube-controller-manager (taints, CIDRs) write the
	// new Node too: on a conflict, read it again and post the status again,
	// as the kubelet does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		created.Status = status
		_, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if cur, gerr := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				created = cur
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return a.renewLease(ctx, name)
}

// dataPlaneNodeLabel marks the nodes the chart's data plane runs on (its
// haproxy.nodeSelector default); dataPlaneTaint keeps other pods off them
// (the lab's chart values tolerate it).
const dataPlaneNodeLabel = "zerodrop.dev/data-plane"

var DataPlaneTaint = corev1.Taint{Key: dataPlaneNodeLabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// addHostNodes makes hosts lab Nodes for the data plane, lab-lb-1, … in
// order; called before start.
func (a *Agent) AddHostNodes(hosts []*netlab.Host) {
	for i, h := range hosts {
		name := HostNodeName(i)
		a.hostNodes[name] = h
		a.nodes = append(a.nodes, name)
	}
}

// hostNodeName is the Node name of the i-th load-balancer host.
func HostNodeName(i int) string { return fmt.Sprintf("lab-lb-%d", i+1) }

// heartbeats renew each node's Lease and Ready condition every 10 s, as the
// kubelet does, so that the node lifecycle controller keeps the nodes Ready.
func (a *Agent) heartbeats(ctx context.Context) {
	for traffic.SleepCtx(ctx, 10*time.Second) {
		for _, name := range a.nodes {
			if a.NodeDown(name) {
				continue
			}
			if err := a.renewLease(ctx, name); err != nil && ctx.Err() == nil {
				a.logf("node %s lease: %v", name, err)
			}
			node, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for i := range node.Status.Conditions {
				node.Status.Conditions[i].LastHeartbeatTime = metav1.Now()
			}
			_, _ = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		}
	}
}

func (a *Agent) renewLease(ctx context.Context, name string) error {
	leases := a.client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NowMicro()
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// nodeDown reports whether failNode failed the node.
func (a *Agent) NodeDown(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.down[name]
}

// failNode fails a node as a power loss would: its heartbeats stop (its
// Lease expires, the node lifecycle controller marks it unreachable) and
// its pods' processes are killed, with no kubelet left to start them again
// or to report anything.
func (a *Agent) FailNode(name string) {
	a.mu.Lock()
	a.down[name] = true
	var rts []*podRuntime
	for _, rt := range a.runtimes {
		if rt.node == name {
			rts = append(rts, rt)
		}
	}
	a.mu.Unlock()
	for _, rt := range rts {
		rt.crash()
	}
	a.logf("node %s failed: %d pods' processes killed, heartbeats stopped", name, len(rts))
}

// recoverNode brings a failed node back, as a rebooted kubelet does: its
// status and Lease again, its pods reported not ready, then their containers
// started again.
func (a *Agent) RecoverNode(ctx context.Context, name string) error {
	a.mu.Lock()
	delete(a.down, name)
	rts := map[string]*podRuntime{}
	for key, rt := range a.runtimes {
		if rt.node == name {
			rts[key] = rt
		}
	}
	a.mu.Unlock()
	if err := a.registerNode(ctx, name); err != nil {
		return err
	}
	for key, rt := range rts {
		ns, pod, _ := strings.Cut(key, "/")
		if p, err := a.Pods.Pods(ns).Get(pod); err == nil {
			if err := a.syncStatus(ctx, p, rt); err != nil {
				return fmt.Errorf("pod %s: %w", key, err)
			}
		}
	}
	for key, rt := range rts {
		if err := rt.restartContainers(ctx); err != nil {
			return fmt.Errorf("pod %s: %w", key, err)
		}
		a.queue.Add(key)
	}
	a.logf("node %s back: %d pods' containers started again", name, len(rts))
	return nil
}
