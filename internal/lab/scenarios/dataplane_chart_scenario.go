package scenarios

import (
	"context"
	"fmt"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios/dataplane"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// actLBReplicaRestartChart is lb-replica-restart on a data plane installed
// from the chart; the same three phases, each done as it happens to the
// chart's pods:
//  1. replica 0's controller container (its zerodrop process) is sent
//     SIGKILL, and after the lab's kubelet started it again (its back-off)
//     and it is ready, SIGTERM: its HAProxy container serves on;
//     writes_per_restart has each restart's writes at that HAProxy's
//     sockets, from the signal to idleVerify after the container is ready;
//  2. the DaemonSet is updated (a new pod-template annotation, as
//     `kubectl rollout restart` does): its controller replaces the pods one
//     at a time (maxUnavailable 1), each leaving pod's route withdrawn as it
//     starts terminating and each new pod's announced once it is Ready;
//  3. replica 1's node fails (agent.failNode: both containers killed, no
//     heartbeats), its route is withdrawn hardDetect later, the lab waits
//     until the node's Lease has expired (the control role then stops
//     counting the replica) and the workload is steady, then the node comes
//     back: its kubelet starts the pod's containers again, from the pod's
//     volume (the configuration and server-state file the zerodrop process
//     last wrote), and the route is announced once the pod is Ready.
func actLBReplicaRestartChart(ctx context.Context, r *run) error {
	n := r.lab.opts.DataPlaneReplicas
	fig := &report.ReplicaFigures{HardDetectSeconds: hardDetect.Seconds()}
	r.replicaFigures = fig
	phaseEnd := r.phases(ctx)

	d := r.dp.ReplicaAt(0)
	if d == nil {
		return fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(0))
	}
	if err := r.restartFirstControllerContainer(ctx, d); err != nil {
		return err
	}
	var err error
	if fig.RestartFailed, fig.RestartBroken, err = phaseEnd(); err != nil {
		return err
	}

	if err := r.updateDataPlaneDaemonSet(ctx, n); err != nil {
		return err
	}
	r.mark("DaemonSet update done")
	if fig.ReplaceFailed, fig.ReplaceBroken, err = phaseEnd(); err != nil {
		return err
	}

	node := cluster.HostNodeName(1)
	r.mark("%s fails: its pod's processes killed, no heartbeats", node)
	r.lab.agent.FailNode(node)
	if !traffic.SleepCtx(ctx, hardDetect) {
		return ctx.Err()
	}
	if err := r.dp.Withdraw(ctx, 1); err != nil {
		return err
	}
	if err := traffic.WaitFor(ctx, 2*time.Minute, node+"'s Lease expired", func() (bool, string) {
		lease, err := r.lab.cp.Client.CoordinationV1().Leases(cluster.NodeLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return leaseExpired(lease, time.Now()), "held"
	}); err != nil {
		return err
	}
	r.mark("%s: Lease expired", node)
	if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	if err := r.lab.agent.RecoverNode(ctx, node); err != nil {
		return err
	}
	r.mark("%s back: its pod's containers started again", node)
	if err := traffic.WaitFor(ctx, 2*time.Minute, "every replica routed again", func() (bool, string) { return r.dp.Routed(n) }); err != nil {
		return err
	}
	fig.HardFailed, fig.HardBroken, err = phaseEnd()
	return err
}

// restartFirstControllerContainer is phase 1: d's (replica 0's)
// controller container sent SIGKILL, then SIGTERM, each time waited for
// until the kubelet has started it again and it is ready; each restart's
// writes go to restartWrites.
func (r *run) restartFirstControllerContainer(ctx context.Context, d *dataplane.Replica) error {
	key := ctrlNamespace + "/" + d.PodName()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.Landed()
		restarts := r.containerRestarts(d.PodName(), chartContainer)
		r.mark("replica 0: %s its controller container", sig)
		if err := r.lab.agent.SignalContainer(key, chartContainer, sig); err != nil {
			return err
		}
		if err := r.waitContainerRestarted(ctx, d.PodName(), chartContainer, restarts); err != nil {
			return err
		}
		r.mark("replica 0: controller container ready again")
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
		r.restartWrites = append(r.restartWrites, d.Landed()-before)
	}
	return nil
}

// updateDataPlaneDaemonSet is phase 2: the DaemonSet's pod template
// changed as `kubectl rollout restart` does, and waited for until its
// controller has replaced every pod and the router stand-in routes all n.
func (r *run) updateDataPlaneDaemonSet(ctx context.Context, n int) error {
	ds := r.lab.cp.Client.AppsV1().DaemonSets(ctrlNamespace)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.zerodrop.dev/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	updated, err := ds.Patch(ctx, r.dataPlaneName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("update the data plane's DaemonSet: %w", err)
	}
	r.mark("DaemonSet %s updated", r.dataPlaneName())
	if err := traffic.WaitFor(ctx, 5*time.Minute, "the DaemonSet update done and every replica routed", func() (bool, string) {
		cur, err := ds.Get(ctx, r.dataPlaneName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if cur.Status.ObservedGeneration < updated.Generation || !dataplane.DaemonSetReady(cur, n) || int(cur.Status.NumberAvailable) != n {
			return false, fmt.Sprintf("%d of %d updated, %d ready", cur.Status.UpdatedNumberScheduled, n, cur.Status.NumberReady)
		}
		return r.dp.Routed(n)
	}); err != nil {
		return err
	}
	return nil
}

// leaseExpired: the Lease was last renewed more than its duration ago.
func leaseExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// containerRestarts is the restart count of container name of pod.
func (r *run) containerRestarts(pod, name string) int32 {
	p, err := r.lab.agent.Pods.Pods(ctrlNamespace).Get(pod)
	if err != nil {
		return 0
	}
	return restartCount(p, name)
}

// restartCount is the restart count of container name of p, by its status.
func restartCount(p *corev1.Pod, name string) int32 {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == name {
			return st.RestartCount
		}
	}
	return 0
}
