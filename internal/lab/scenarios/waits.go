package scenarios

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// restartController deletes the controller pod that writes (the leader), as
// a rolling update of the controller or a deleted pod does: its ReplicaSet
// starts a replacement at once, and the old pod stops (zerodrop's with its
// preStop sleep and SIGTERM). It returns when a replacement is ready. Where
// the world runs the writer (on emulated Azure the CCM), the world
// restarts it.
func (r *run) restartController(ctx context.Context) error {
	if w, ok := r.world.(world.WriterRestarter); ok && w.RestartsWriter() {
		// The world runs the writer: SIGTERM, as a pod's deletion sends.
		return w.RestartWriter(ctx, syscall.SIGTERM, func(leader string) { r.mark("restart %s", leader) })
	}
	target, err := r.waitLeader(ctx, "")
	if err != nil {
		return err
	}
	r.mark("restart %s", world.ShortPod(target))
	if err := r.lab.cp.Client.CoreV1().Pods(ctrlNamespace).Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("restart %s: %w", target, err)
	}
	return r.waitControllersReady(ctx, target)
}

// waitLeader waits for a controller pod other than not that reports the
// leader lease (zerodrop: after a restart the lease moves once the old
// leader has stopped; the upstream controller's once the lease expired).
func (r *run) waitLeader(ctx context.Context, not string) (string, error) {
	target := ""
	err := traffic.WaitFor(ctx, 60*time.Second, "a controller holding the leader lease", func() (bool, string) {
		target = r.ctrls.leader()
		return target != "" && target != not, "no replica reports leader_election_master_status 1"
	})
	return target, err
}

// waitControllersReady waits until the mode's replicas, old excluded, are
// ready.
func (r *run) waitControllersReady(ctx context.Context, old string) error {
	return traffic.WaitFor(ctx, 60*time.Second, "a replacement controller pod ready", func() (bool, string) {
		ready := 0
		for _, p := range r.ctrls.pods() {
			if p.Name != old && p.DeletionTimestamp == nil && cluster.ConditionStatus(p, corev1.PodReady) == corev1.ConditionTrue {
				ready++
			}
		}
		return ready >= controllerReplicas, fmt.Sprintf("%d ready controller pods, want %d", ready, controllerReplicas)
	})
}

// servingNodes counts the nodes a Local Service's load balancer must send
// to: those with a pod of the run but a node the run tainted for deletion
// (maintenance), which some writers take out and others keep (the steady
// check leaves its backend out).
func (r *run) servingNodes(ctx context.Context) (int, error) {
	nodes, err := r.podNodeNames(ctx)
	n := 0
	for _, node := range nodes {
		if !slices.Contains(r.tainted, node) {
			n++
		}
	}
	return n, err
}

// podNodeNames lists, sorted, the nodes the run's pods that are not
// terminating run on.
func (r *run) podNodeNames(ctx context.Context) ([]string, error) {
	pods, err := r.lab.cp.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + appName})
	if err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			nodes[p.Spec.NodeName] = true
		}
	}
	return slices.Sorted(maps.Keys(nodes)), nil
}

// drainReachable connects to the drain Service's ClusterIP from every node.
func (r *run) drainReachable(ctx context.Context) error {
	addr := net.JoinHostPort(cluster.DrainClusterIP, strconv.Itoa(drainPort))
	for _, n := range r.lab.net.Net.Nodes {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := n.DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			return fmt.Errorf("drain Service from %s: %w", cluster.NodeName(n.Index), err)
		}
		c.Close()
	}
	return nil
}
