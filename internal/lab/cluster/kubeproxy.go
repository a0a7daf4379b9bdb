package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// A node's kube-proxy exits by design when its Node's addresses change or
// its Node is deleted (NodeManager.OnNodeUpdate and OnNodeDelete,
// pkg/proxy/node.go of kubernetes v1.37.2), counting on the kubelet to
// start its DaemonSet pod again; at its start it waits only 30 s for its
// Node to have addresses (newNodeManager there). The lab registers its
// Nodes after the network is made (the agent, once the world is
// prepared): under load that came later than 30 s, and the kube-proxy of
// each node exited a second after its Node's addresses appeared ("NodeIPs
// changed for the node", oldNodeIPs null), leaving the node without
// Service rules for good (cold CI, TestLabBGPSpeakerRestart: the API
// server never reached the webhook through node 1). So the lab starts an
// exited kube-proxy again, as the kubelet would.
//
// The kubelet waits 10 s before its first restart of a crashed container,
// doubling to 5 min; the lab starts sooner, kubeProxyRestartDelay doubling
// to kubeProxyRestartMax, as its runs begin right after its Nodes register.
const (
	kubeProxyRestartDelay = time.Second
	kubeProxyRestartMax   = 30 * time.Second
)

// kubeProxy is one node's kube-proxy: its current process, how often it
// was started again, and its log (each process appends to it).
type kubeProxy struct {
	node string
	log  string

	mu       sync.Mutex
	p        *netlab.Process
	restarts int
}

func (k *kubeProxy) current() (*netlab.Process, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.p, k.restarts
}

// startKubeProxies starts the real kube-proxy on every node, each reaching
// the API server through a forwarder in its namespace, and keeps each
// running (keepKubeProxy) until Close.
func (n *Network) startKubeProxies(ctx context.Context, dir string, logf func(string, ...any)) error {
	assets, err := controlplane.Assets("kube-proxy")
	if err != nil {
		return fmt.Errorf("kube-proxy: %w", err)
	}
	for _, node := range n.Net.Nodes {
		// Service ClusterIPs are routed out of the node, as a node's default
		// route does; kube-proxy's output chain translates them first.
		if err := node.Run(ctx, "ip", "route", "add", serviceCIDR, "dev", "eth0"); err != nil {
			return err
		}
		if _, err := n.Net.Forward(node.Netns, APIServerInNetns, n.apiserver); err != nil {
			return fmt.Errorf("node %d: API server forwarder: %w", node.Index, err)
		}
		k := &kubeProxy{node: NodeName(node.Index), log: filepath.Join(dir, fmt.Sprintf("kube-proxy-%s.log", NodeName(node.Index)))}
		start := func() (*netlab.Process, error) {
			logFile, err := os.OpenFile(k.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return nil, err
			}
			defer logFile.Close()
			return n.Net.Start(node.Netns, logFile, logFile, filepath.Join(assets, "kube-proxy"),
				"--kubeconfig", n.Kubeconfig,
				"--hostname-override", k.node,
				"--proxy-mode", "nftables",
				"--cluster-cidr", "198.19.0.0/16",
				"--healthz-bind-address", fmt.Sprintf("0.0.0.0:%d", kubeProxyHealthzPort),
				"--metrics-bind-address", "127.0.0.1:10249",
				// The kernel's conntrack table size is not per namespace: leave it.
				"--conntrack-max-per-core", "0",
				"--v", "1",
			)
		}
		if k.p, err = start(); err != nil {
			return err
		}
		n.kubeProxies = append(n.kubeProxies, k)
		n.kubeProxyWG.Add(1)
		go n.keepKubeProxy(k, start, logf)
	}
	return nil
}

// keepKubeProxy starts k's kube-proxy again each time it exits, after a
// delay that doubles per exit, until kubeProxyStop is closed (Close) or a
// start fails (the lab is closing).
func (n *Network) keepKubeProxy(k *kubeProxy, start func() (*netlab.Process, error), logf func(string, ...any)) {
	defer n.kubeProxyWG.Done()
	delay := kubeProxyRestartDelay
	for {
		p, _ := k.current()
		select {
		case <-p.Done():
		case <-n.kubeProxyStop:
			return
		}
		select {
		case <-n.kubeProxyStop:
			return
		default:
		}
		logf("kube-proxy on %s exited (code %d): starting it again in %s, as the kubelet starts its pod again (its log: %s)",
			k.node, p.ExitCode(), delay, k.log)
		select {
		case <-time.After(delay):
		case <-n.kubeProxyStop:
			return
		}
		delay = min(2*delay, kubeProxyRestartMax)
		np, err := start()
		if err != nil {
			logf("kube-proxy on %s: not started again: %v", k.node, err)
			return
		}
		k.mu.Lock()
		k.p, k.restarts = np, k.restarts+1
		k.mu.Unlock()
	}
}

// stopKubeProxies ends the keepers (not the processes: the lab's Close
// does) and waits for them.
func (n *Network) stopKubeProxies() {
	n.stopOnce.Do(func() {
		if n.kubeProxyStop != nil {
			close(n.kubeProxyStop)
		}
	})
	n.kubeProxyWG.Wait()
}
