package dataplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
)

// The router stand-in of a data plane installed from the chart (the
// operator's BGP daemon or keepalived), by the rule of routes.go: a host
// is announced once a data-plane pod on it is Ready and the lab views its
// HAProxy, and its route follows the node, not the pod — it stays while
// pods on it terminate or are replaced, and is withdrawn when its Node
// leaves (routeLoop) or when the scenario withdraws a failed node's route
// (Withdraw), after which it is not announced again while the node is
// down.

// setRoutesLocked (routeMu held) routes the client to the load-balancer
// hosts members.
func (p *Plane) setRoutesLocked(ctx context.Context, fresh bool, members []int) error {
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

// routeState is the router stand-in's view: every data-plane pod of the run
// (two on one host during a surge) and every load-balancer host's Node.
// Ready counts from a transition after the lab's view: a failed node's pod
// keeps the Ready its dead kubelet last reported until the node is back
// and reports again.
func (p *Plane) routeState() ([]podRoute, map[int]nodeRoute) {
	var pods []podRoute
	for _, d := range p.Replicas() {
		d.mu.Lock()
		viewed, since := d.prov != nil, d.viewedAt.Truncate(time.Second)
		d.mu.Unlock()
		pod, err := p.cfg.Agent.Pods.Pods(world.ControllerNamespace).Get(d.podName)
		if err != nil {
			continue
		}
		pods = append(pods, podRoute{host: d.index, viewed: viewed, ready: readySince(pod, since), terminating: pod.DeletionTimestamp != nil})
	}
	nodes := map[int]nodeRoute{}
	for i := range p.cfg.Net.LBs {
		nodes[i] = nodeRoute{down: p.cfg.Agent.NodeDown(cluster.HostNodeName(i)), leaving: p.nodeLeaving(i)}
	}
	return pods, nodes
}

// nodeLeaving: host i's Node gives a signal that it leaves (routes.go's
// nodeLeaving); false before the router watches the Nodes.
func (p *Plane) nodeLeaving(i int) bool {
	p.routeMu.Lock()
	nodes, labelled := p.nodes, p.labelledAtStart[i]
	p.routeMu.Unlock()
	if nodes == nil {
		return false
	}
	node, err := nodes.Get(cluster.HostNodeName(i))
	if apierrors.IsNotFound(err) {
		return nodeLeaving(nil, labelled)
	}
	if err != nil {
		return false
	}
	return nodeLeaving(node, labelled)
}

// watchNodes starts the router's watch of the Nodes (until runCtx ends)
// and records which load-balancer hosts' Nodes carry the exclusion label
// at the start (nodeLeaving says why).
func (p *Plane) watchNodes(ctx, runCtx context.Context) error {
	factory := informers.NewSharedInformerFactory(p.cfg.Client, 0)
	nodes := factory.Core().V1().Nodes()
	nodes.Informer()
	factory.Start(runCtx.Done())
	go func() {
		<-runCtx.Done()
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the router stand-in's watch of %v did not sync", typ)
		}
	}
	labelled := map[int]bool{}
	for i := range p.cfg.Net.LBs {
		if n, err := nodes.Lister().Get(cluster.HostNodeName(i)); err == nil {
			_, labelled[i] = n.Labels[model.LabelExcludeFromLB]
		}
	}
	p.routeMu.Lock()
	p.nodes, p.labelledAtStart = nodes.Lister(), labelled
	p.routeMu.Unlock()
	return nil
}

// serving are the load-balancer hosts on which a data-plane pod is Ready,
// not terminating and viewed by the lab, on a node that is up and not
// leaving: those a router daemon would announce.
func (p *Plane) serving() []int {
	return servingHosts(p.routeState())
}

// Routed: n hosts serve (what the router announces), and the client's
// route has all n.
func (p *Plane) Routed(n int) (bool, string) {
	if p.cfg.FRR != nil {
		return p.frrRouted(n)
	}
	serving := len(p.serving())
	p.routeMu.Lock()
	routed := len(p.routed)
	p.routeMu.Unlock()
	return serving == n && routed == n, fmt.Sprintf("%d of %d hosts serving, %d routed", serving, n, routed)
}

// Withdraw takes host index out of the client's route, as a router's BFD
// does for a failed node; the route loop does not announce it again while
// its node is down. With no host left, the route stays (a nexthop group
// cannot be empty) and the lab says so.
func (p *Plane) Withdraw(ctx context.Context, index int) error {
	if p.cfg.FRR != nil {
		// The lab fails a node by killing its pod's processes: the node's
		// kernel closes the speaker's session, so the router, graceful
		// restart's helper, keeps the node's routes until the restart time
		// runs out (measured: docs/lab.md); the hold time applies to a node
		// that goes silent (TestLabBGPNodeLeaveAndFail drops its uplink).
		p.cfg.Mark("host %d failed: its speaker's session closed with its processes, so the router keeps its routes for the graceful-restart time (%s), not the hold time (%s)", index, GracefulRestartTime, HoldTime)
		return nil
	}
	p.routeMu.Lock()
	defer p.routeMu.Unlock()
	members := slices.DeleteFunc(slices.Clone(p.routed), func(i int) bool { return i == index })
	if len(members) == 0 {
		p.cfg.Logf("%s: no other load-balancer host is routed: host %d's route stays", p.cfg.Name, index)
		return nil
	}
	return p.setRoutesLocked(ctx, false, members)
}

// Stopping is called by the agent when a pod of the run starts
// terminating, before its containers are stopped: a data-plane pod's
// termination is put on the timeline, and its node's route stays (the
// route follows the node).
func (p *Plane) Stopping(pod *corev1.Pod) {
	if p.cfg.DaemonSet == "" || pod.Labels[LabelAppName] != p.cfg.DaemonSet {
		return
	}
	if i := p.hostIndex(pod.Spec.NodeName); i >= 0 {
		p.cfg.Mark("%s terminating: host %d's route stays", pod.Name, i)
	}
}

// routeLoop sets the route by the rule (nextRoute) every 200 ms until ctx
// ends: announces every host that serves, withdraws every host whose node
// leaves. A failed node's withdrawal is the scenario's (Withdraw).
func (p *Plane) routeLoop(ctx context.Context) {
	warned := false
	for traffic.SleepCtx(ctx, 200*time.Millisecond) {
		pods, nodes := p.routeState()
		p.routeMu.Lock()
		members, kept := nextRoute(p.routed, pods, nodes)
		for _, h := range p.routed {
			if !slices.Contains(members, h) {
				p.cfg.Mark("%s leaves: host %d's route withdrawn", cluster.HostNodeName(h), h)
			}
		}
		if kept && !warned {
			p.cfg.Logf("%s: every routed host's node leaves and none other serves: the route stays", p.cfg.Name)
		}
		warned = kept
		err := p.setRoutesLocked(ctx, false, members)
		p.routeMu.Unlock()
		if err != nil && ctx.Err() == nil {
			p.cfg.Logf("%s: route: %v", p.cfg.Name, err)
		}
	}
}
