package scenarios

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// startShared starts what every scenario shares: the control plane, the
// network with kube-proxy on every node, the node agent, the drain Service
// and the webhook.
func (l *lab) startShared(ctx context.Context) (err error) {
	l.progressf("starting kube-apiserver, etcd and kube-controller-manager")
	if l.cp, err = cluster.StartControlPlane(ctx, l.dir); err != nil {
		return err
	}
	l.progressf("making the network: %d nodes, kube-proxy on each, load balancer and client namespaces", labNodes)
	hosts := 1
	if h, ok := l.opts.World.(world.Hosts); ok {
		hosts = h.LoadBalancerHosts()
	}
	l.net, err = cluster.StartNetwork(ctx, l.dir, labNodes, hosts, l.cp.Config, l.logf)
	if err != nil {
		return err
	}
	if l.egress, err = cluster.ServeEgress(cluster.EgressSocket(l.dir), l.net.Net.Nodes[0].DialContext, l.logf); err != nil {
		return err
	}
	l.agent = cluster.NewAgent(l.cp.Client, l.net, l.opts.Executable, l.dir, l.logf)
	w := l.opts.World
	if err := w.Prepare(ctx, world.Lab{Net: l.net, CP: l.cp, Agent: l.agent, Dir: l.dir, Executable: l.opts.Executable,
		Logf: l.logf, Progressf: l.progressf}); err != nil {
		return fmt.Errorf("%s: %w", w.Name(), err)
	}
	agentCtx, cancel := context.WithCancel(context.Background())
	l.agent.OnStop = func(p *corev1.Pod) {
		if p.Namespace != ctrlNamespace {
			return
		}
		l.curMu.Lock()
		r := l.current
		l.curMu.Unlock()
		if r != nil && r.ctrls != nil && p.Labels[labelRun] == strconv.Itoa(r.id) {
			r.ctrls.stopping(p)
			if dp := r.dataPlane(); dp != nil {
				dp.PodStopping(p)
			}
		}
	}
	l.hooks = map[string]int{}
	l.agent.HookDone = func(p *corev1.Pod, failed bool) {
		if failed {
			l.curMu.Lock()
			l.hooks[p.Namespace]++
			l.curMu.Unlock()
		}
	}
	// zerodrop's controller pods reach what the current run's world
	// serves them (emulated Azure's ARM) on their loopback, as they reach
	// the API server.
	l.agent.ControllerForwards = func() []string {
		l.curMu.Lock()
		defer l.curMu.Unlock()
		if r := l.current; r != nil && r.world != nil {
			return r.world.Forwards()
		}
		return nil
	}
	l.agentStop = cancel
	if err := l.agent.Start(agentCtx); err != nil {
		return err
	}
	if in, ok := w.(world.Installer); ok && in.InstallsZerodrop() {
		// The world's webhook and drain Service, per run.
		if err := l.ctrlNamespace(ctx); err != nil {
			return err
		}
		l.progressf("control plane up: %d nodes and %d data-plane nodes (%s); zerodrop installed per run by %s", labNodes, len(l.net.LBs), l.net.Net.Prefix, w.Name())
		return nil
	}
	if err := l.startDrainService(ctx); err != nil {
		return err
	}
	if l.hook, err = startWebhook(ctx, l.cp); err != nil {
		return err
	}
	l.progressf("control plane up: %d nodes (%s), webhook, drain Service %s:%d", labNodes, l.net.Net.Prefix, cluster.DrainClusterIP, drainPort)
	return nil
}

// stopShared stops them again, in reverse order; the network last, with
// every process still in it.
func (l *lab) stopShared() {
	l.hook.close()
	if l.agentStop != nil {
		l.agentStop()
		l.agent.Wait()
	}
	if l.egress != nil {
		l.egress.Close()
	}
	if err := l.net.Close(); err != nil {
		l.progressf("network teardown: %v", err)
	}
	if l.cp != nil {
		l.cp.Stop()
	}
}
