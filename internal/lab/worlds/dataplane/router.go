package dataplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// The router stand-in of a data plane installed from the chart (the
// operator's BGP daemon or keepalived): a replica's route is withdrawn when
// its pod starts terminating, WithdrawSettle before its containers are told
// to stop (Stopping), and announced once its pod is Ready and the lab views
// its HAProxy (announceLoop); a failed node's replica is withdrawn by the
// scenario and not announced again while its node is down.

// WithdrawSettle is how long the lab waits between withdrawing a replica's
// route and stopping it: a router's convergence is not instant either, and
// a connection being opened through the replica at the withdrawal completes.
const WithdrawSettle = time.Second

// setRoutes routes the client to the load-balancer hosts members.
func (p *Plane) setRoutes(ctx context.Context, fresh bool, members []int) error {
	p.routeMu.Lock()
	defer p.routeMu.Unlock()
	if !fresh && slices.Equal(members, p.routed) {
		return nil
	}
	if err := p.cfg.Net.RouteTo(ctx, fresh, members...); err != nil {
		return err
	}
	p.cfg.Mark("client routed to load-balancer hosts %v", members)
	p.routed = slices.Clone(members)
	return nil
}

// serving are the load-balancer hosts whose data-plane pod is Ready, not
// terminating and viewed by the lab, on a node that is up: those a router
// daemon checking the replicas would announce. Ready counts from a
// transition after the view: a failed node's pod keeps the Ready its dead
// kubelet last reported until the node is back and reports again.
func (p *Plane) serving() []int {
	var out []int
	for _, d := range p.Replicas() {
		d.mu.Lock()
		viewed, since := d.prov != nil, d.viewedAt.Truncate(time.Second)
		d.mu.Unlock()
		if !viewed || p.cfg.Agent.NodeDown(cluster.HostNodeName(d.index)) {
			continue
		}
		pod, err := p.cfg.Agent.Pods.Pods(world.ControllerNamespace).Get(d.podName)
		if err != nil || pod.DeletionTimestamp != nil || !readySince(pod, since) {
			continue
		}
		out = append(out, d.index)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Routed: n replicas serve (what the router announces), and the client's
// route has all n hosts.
func (p *Plane) Routed(n int) (bool, string) {
	serving := len(p.serving())
	p.routeMu.Lock()
	routed := len(p.routed)
	p.routeMu.Unlock()
	return serving == n && routed == n, fmt.Sprintf("%d of %d replicas serving, %d routed", serving, n, routed)
}

// Withdraw takes host index out of the client's route: the route goes to
// the other hosts that serve. With none left, the route stays (a nexthop
// group cannot be empty) and the lab says so.
func (p *Plane) Withdraw(ctx context.Context, index int) error {
	members := slices.DeleteFunc(p.serving(), func(i int) bool { return i == index })
	if len(members) == 0 {
		p.cfg.Logf("%s: no other load-balancer host serves: host %d's route stays", p.cfg.Name, index)
		return nil
	}
	return p.setRoutes(ctx, false, members)
}

// Stopping is called by the agent when a pod of the run starts
// terminating, before its containers are stopped: a data-plane pod's route
// is withdrawn, and the stop waits WithdrawSettle.
func (p *Plane) Stopping(pod *corev1.Pod) {
	if p.cfg.DaemonSet == "" || pod.Labels[LabelAppName] != p.cfg.DaemonSet {
		return
	}
	i := p.hostIndex(pod.Spec.NodeName)
	if i < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.cfg.Mark("%s terminating", pod.Name)
	if err := p.Withdraw(ctx, i); err != nil {
		p.cfg.Logf("%s: withdraw %s's route: %v", p.cfg.Name, pod.Name, err)
	}
	time.Sleep(WithdrawSettle)
}

// announceLoop announces the route of every host that serves (serving)
// and is not routed yet, until ctx ends; withdrawals are Stopping's and
// the scenario's.
func (p *Plane) announceLoop(ctx context.Context) {
	for traffic.SleepCtx(ctx, 200*time.Millisecond) {
		p.routeMu.Lock()
		members := slices.Clone(p.routed)
		p.routeMu.Unlock()
		for _, i := range p.serving() {
			if !slices.Contains(members, i) {
				members = append(members, i)
			}
		}
		slices.Sort(members)
		if err := p.setRoutes(ctx, false, members); err != nil && ctx.Err() == nil {
			p.cfg.Logf("%s: announce: %v", p.cfg.Name, err)
		}
	}
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
