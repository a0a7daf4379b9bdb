package scenarios

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// chartContainer is the container that runs zerodrop in the chart's
// controller Deployment and in its data-plane DaemonSet (beside haproxy).
const chartContainer = "controller"

// restartIdleChart is restart i of restart-idle on zerodrop installed from
// the chart, where two kinds of process write or decide what is written:
// the controller Deployment's leader (the control role) and each
// data-plane pod's zerodrop container (the one writer of its HAProxy). Both
// get sig at once, as a node's reboot or an upgrade of both would do: the
// leader's controller container and the controller container of data-plane
// replica i mod N; the lab's kubelet starts each again in place after its
// back-off, as the kubelet does. The restart lasts until another process
// holds the lease and both containers run again and are ready (the act
// then waits idleVerify more). It returns the writes counted at every data-plane HAProxy's
// sockets when the signals were sent.
func (r *run) restartIdleChart(ctx context.Context, i int) (int64, error) {
	sig, _ := world.IdleStop(i)
	leader, err := r.waitLeader(ctx, "")
	if err != nil {
		return 0, err
	}
	n := r.lab.opts.DataPlaneReplicas
	d := r.dp.ReplicaAt(i % n)
	if d == nil {
		return 0, fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(i%n))
	}
	targets := []string{leader, d.PodName()}
	before := make([]int32, len(targets))
	for j, pod := range targets {
		before[j] = r.containerRestarts(pod, chartContainer)
	}
	at, err := r.landed()
	if err != nil {
		return 0, err
	}
	r.mark("%s %s (the leader) and %s (data-plane replica %d): their %s containers", sig, shortPod(leader), shortPod(d.PodName()), i%n, chartContainer)
	// The leader's process is no leader candidate from here on; its
	// container's next process is scraped under a key of its own
	// (controllers.scrapeKey), so it may take the lease again.
	r.ctrls.gone(leader)
	for _, pod := range targets {
		if err := r.lab.agent.SignalContainer(ctrlNamespace+"/"+pod, chartContainer, sig); err != nil {
			return 0, err
		}
	}
	next, err := r.waitLeader(ctx, "")
	if err != nil {
		return 0, err
	}
	r.mark("leader %s", shortPod(next))
	for j, pod := range targets {
		if err := r.waitContainerRestarted(ctx, pod, chartContainer, before[j]); err != nil {
			return 0, err
		}
	}
	r.mark("both containers ready again")
	return at, nil
}

// waitContainerRestarted waits until container name of the chart's pod
// has been started again (its restart count above before) and is ready.
// The kubelet's back-off is 10 s, doubling with each restart.
func (r *run) waitContainerRestarted(ctx context.Context, pod, name string, before int32) error {
	return traffic.WaitFor(ctx, 6*time.Minute, pod+"'s "+name+" container started again and ready", func() (bool, string) {
		p, err := r.lab.agent.Pods.Pods(ctrlNamespace).Get(pod)
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

// chartReplicaWriter is kill-mid-plan's writer on zerodrop installed from
// the chart: the controller container of a data-plane pod (the replicas in
// turn), the one writer of its HAProxy. After the kill the lab's kubelet
// starts it again in place after its back-off while the pod's HAProxy
// serves on, and the lab waits until it is ready.
func (r *run) chartReplicaWriter(_ context.Context, kills int) (writer, error) {
	i := kills % r.lab.opts.DataPlaneReplicas
	d := r.dp.ReplicaAt(i)
	if d == nil {
		return writer{}, fmt.Errorf("no data-plane pod on %s", cluster.HostNodeName(i))
	}
	pod := d.PodName()
	before := r.containerRestarts(pod, chartContainer)
	return writer{
		name:    fmt.Sprintf("%s (data-plane replica %d)'s %s container", shortPod(pod), i, chartContainer),
		onWrite: func(f func(string)) { onWrite(d.Socks(), f) },
		kill: func() {
			if err := r.lab.agent.SignalContainer(ctrlNamespace+"/"+pod, chartContainer, syscall.SIGKILL); err != nil {
				r.lab.logf("%s: kill %s: %v", r.name(), pod, err)
			}
		},
		recover: func(ctx context.Context) error { return r.waitContainerRestarted(ctx, pod, chartContainer, before) },
	}, nil
}

// chartBackoffs is the lab's kubelet's back-off summed over kills restarts
// of n containers killed in turn (10 s, doubling with each restart of the
// same container, at most 5 min): what kill-mid-plan on the chart's install
// waits for on top of each kill's own recovery.
func chartBackoffs(kills, n int) time.Duration {
	var d time.Duration
	for k := range kills {
		d += min(10*time.Second<<(k/max(n, 1)), 5*time.Minute)
	}
	return d
}
