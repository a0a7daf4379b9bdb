package chart

import (
	"context"
	"fmt"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// DisruptReplicas is lb-replica-restart on the chart's data plane, each of
// its three phases done as it happens to the chart's pods (docs/lab.md,
// "Installed from the chart", describes them): (1) replica 0's controller
// container restarted in place (restartFirstControllerContainer); (2) the
// DaemonSet updated (updateDaemonSet); (3) replica 1's node failed, its
// Lease left to expire, and the node back, its kubelet starting the pod's
// containers again from the pod's volume.
func (r *run) DisruptReplicas(ctx context.Context, act world.Act, fig *report.ReplicaFigures) error {
	n := r.w.N
	agent := r.w.Lab.Agent
	fig.HardDetectSeconds = dataplane.HardDetect.Seconds()
	d := r.Plane.ReplicaAt(0)
	if d == nil {
		return fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(0))
	}
	if err := r.restartFirstControllerContainer(ctx, act, d); err != nil {
		return err
	}
	var err error
	if fig.RestartFailed, fig.RestartBroken, err = act.PhaseEnd(); err != nil {
		return err
	}

	if err := r.updateDaemonSet(ctx, act, n); err != nil {
		return err
	}
	act.Mark("DaemonSet update done")
	if fig.ReplaceFailed, fig.ReplaceBroken, err = act.PhaseEnd(); err != nil {
		return err
	}

	node := cluster.HostNodeName(1)
	act.Mark("%s fails: its pod's processes killed, no heartbeats", node)
	agent.FailNode(node)
	if !traffic.SleepCtx(ctx, dataplane.HardDetect) {
		return ctx.Err()
	}
	if err := r.Plane.Withdraw(ctx, 1); err != nil {
		return err
	}
	if err := traffic.WaitFor(ctx, 2*time.Minute, node+"'s Lease expired", func() (bool, string) {
		lease, err := r.w.Lab.CP.Client.CoordinationV1().Leases(cluster.NodeLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return leaseExpired(lease, time.Now()), "held"
	}); err != nil {
		return err
	}
	act.Mark("%s: Lease expired", node)
	if err := act.WaitSteady(ctx); err != nil {
		return err
	}
	if err := agent.RecoverNode(ctx, node); err != nil {
		return err
	}
	act.Mark("%s back: its pod's containers started again", node)
	if err := traffic.WaitFor(ctx, 2*time.Minute, "every replica routed again", func() (bool, string) { return r.Plane.Routed(n) }); err != nil {
		return err
	}
	fig.HardFailed, fig.HardBroken, err = act.PhaseEnd()
	return err
}

// restartFirstControllerContainer is phase 1: d's (replica 0's)
// controller container sent SIGKILL, then SIGTERM, each time waited for
// until the kubelet has started it again and it is ready.
func (r *run) restartFirstControllerContainer(ctx context.Context, act world.Act, d *dataplane.Replica) error {
	key := world.ControllerNamespace + "/" + d.Pod()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.Landed()
		restarts := r.containerRestarts(d.Pod())
		act.Mark("replica 0: %s its controller container", sig)
		if err := r.w.Lab.Agent.SignalContainer(key, world.ControllerContainer, sig); err != nil {
			return err
		}
		if err := r.waitContainerRestarted(ctx, d.Pod(), restarts); err != nil {
			return err
		}
		act.Mark("replica 0: controller container ready again")
		if !traffic.SleepCtx(ctx, world.IdleVerify) {
			return ctx.Err()
		}
		act.RestartWrites(d.Landed() - before)
	}
	return nil
}

// updateDaemonSet is phase 2: the DaemonSet's pod template changed as
// `kubectl rollout restart` does, and waited for until its controller has
// replaced every pod and the router stand-in routes all n.
func (r *run) updateDaemonSet(ctx context.Context, act world.Act, n int) error {
	ds := r.w.Lab.CP.Client.AppsV1().DaemonSets(world.ControllerNamespace)
	updated, err := r.patchDaemonSet(ctx, act)
	if err != nil {
		return err
	}
	// One replica at a time, each old pod draining for up to its grace
	// period (its HAProxy stops softly) before the next is replaced.
	return traffic.WaitFor(ctx, 2*time.Minute+time.Duration(n)*90*time.Second, "the DaemonSet update done and every replica routed", func() (bool, string) {
		cur, err := ds.Get(ctx, r.dataPlaneName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if cur.Status.ObservedGeneration < updated.Generation || !dataplane.DaemonSetReady(cur, n) || int(cur.Status.NumberAvailable) != n {
			return false, fmt.Sprintf("%d of %d updated, %d ready", cur.Status.UpdatedNumberScheduled, n, cur.Status.NumberReady)
		}
		return r.Plane.Routed(n)
	})
}

// patchDaemonSet changes the data plane's pod template (a new annotation,
// as `kubectl rollout restart` does) and returns the DaemonSet as patched.
func (r *run) patchDaemonSet(ctx context.Context, act world.Act) (*appsv1.DaemonSet, error) {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.zerodrop.dev/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	updated, err := r.w.Lab.CP.Client.AppsV1().DaemonSets(world.ControllerNamespace).Patch(ctx, r.dataPlaneName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("update the data plane's DaemonSet: %w", err)
	}
	act.Mark("DaemonSet %s updated", r.dataPlaneName())
	return updated, nil
}

// leaseExpired: the Lease was last renewed more than its duration ago.
func leaseExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// containerRestarts is the restart count of the controller container of
// pod (in world.ControllerNamespace), from the agent's cache.
func (r *run) containerRestarts(pod string) int32 {
	return r.w.Lab.Agent.ContainerRestartsOf(world.ControllerNamespace+"/"+pod, world.ControllerContainer)
}

// waitContainerRestarted waits until the controller container of the
// chart's pod has been started again (its restart count above before) and
// is ready. The kubelet's back-off is 10 s, doubling with each restart.
func (r *run) waitContainerRestarted(ctx context.Context, pod string, before int32) error {
	name := world.ControllerContainer
	return traffic.WaitFor(ctx, 6*time.Minute, pod+"'s "+name+" container started again and ready", func() (bool, string) {
		p, err := r.w.Lab.Agent.Pods.Pods(world.ControllerNamespace).Get(pod)
		if err != nil {
			return false, err.Error()
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name == name {
				return st.RestartCount > before && st.Ready, fmt.Sprintf("restarts %d, ready %v", st.RestartCount, st.Ready)
			}
		}
		return false, "no status"
	})
}

// RestartsWriter: restart-idle restarts the chart's processes.
func (r *run) RestartsWriter() bool { return true }

// RestartWriter is one restart of restart-idle on the chart's install,
// where two kinds of process write or decide what is written: the
// controller Deployment's leader (the control role) and each data-plane
// pod's zerodrop container (the one writer of its HAProxy). Both get sig
// at once, as a node's reboot or an upgrade of both would do: the leader's
// controller container and the controller container of the next
// data-plane replica in turn; the lab's kubelet starts each again in
// place after its back-off, as the kubelet does. The restart lasts until
// another process holds the lease and both containers run again and are
// ready.
func (r *run) RestartWriter(ctx context.Context, sig syscall.Signal, atKill func(leader string)) error {
	leader, err := r.Env.WaitLeader(ctx, "")
	if err != nil {
		return err
	}
	n := r.w.N
	i := r.idleRestarts % n
	r.idleRestarts++
	d := r.Plane.ReplicaAt(i)
	if d == nil {
		return fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(i))
	}
	targets := []string{leader, d.Pod()}
	before := make([]int32, len(targets))
	for j, pod := range targets {
		before[j] = r.containerRestarts(pod)
	}
	atKill(fmt.Sprintf("%s (the leader) and %s (data-plane replica %d): their %s containers",
		world.ShortPod(leader), world.ShortPod(d.Pod()), i, world.ControllerContainer))
	// The leader's process is no leader candidate from here on; its
	// container's next process is scraped under a key of its own (by its
	// restarts), so it may take the lease again.
	r.Env.Gone(leader)
	for _, pod := range targets {
		if err := r.w.Lab.Agent.SignalContainer(world.ControllerNamespace+"/"+pod, world.ControllerContainer, sig); err != nil {
			return err
		}
	}
	next, err := r.Env.WaitLeader(ctx, "")
	if err != nil {
		return err
	}
	r.Env.Mark("leader %s", world.ShortPod(next))
	for j, pod := range targets {
		if err := r.waitContainerRestarted(ctx, pod, before[j]); err != nil {
			return err
		}
	}
	r.Env.Mark("both containers ready again")
	return nil
}

// MidPlanWriter is kill-mid-plan's writer on the chart's install: the
// controller container of a data-plane pod (the replicas in turn), the one
// writer of its HAProxy. After the kill the lab's kubelet starts it again
// in place after its back-off while the pod's HAProxy serves on, and the
// lab waits until it is ready.
func (r *run) MidPlanWriter(_ context.Context, kills int) (world.Writer, error) {
	i := kills % r.w.N
	d := r.Plane.ReplicaAt(i)
	if d == nil {
		return world.Writer{}, fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(i))
	}
	pod := d.Pod()
	before := r.containerRestarts(pod)
	return world.Writer{
		Name:    fmt.Sprintf("%s (data-plane replica %d)'s %s container", world.ShortPod(pod), i, world.ControllerContainer),
		OnWrite: func(f func(string)) { sockcount.OnWriteAll(d.Socks(), f) },
		Kill: func() {
			if err := r.w.Lab.Agent.SignalContainer(world.ControllerNamespace+"/"+pod, world.ControllerContainer, syscall.SIGKILL); err != nil {
				r.Env.Logf("%s: kill %s: %v", r.Env.Name, pod, err)
			}
		},
		Recover: func(ctx context.Context) error { return r.waitContainerRestarted(ctx, pod, before) },
	}, nil
}

// IdleRestart: each container restart waits out the kubelet's back-off
// (10 s, doubling per restart of the same container).
func (r *run) IdleRestart() time.Duration { return 90 * time.Second }

// KillsBackoff is the lab's kubelet's back-off summed over kills restarts
// of the replicas' containers killed in turn (10 s, doubling with each
// restart of the same container, at most 5 min): what kill-mid-plan waits
// for on top of each kill's own recovery.
func (r *run) KillsBackoff(kills int) time.Duration {
	var d time.Duration
	for k := range kills {
		d += min(10*time.Second<<(k/max(r.w.N, 1)), 5*time.Minute)
	}
	return d
}
