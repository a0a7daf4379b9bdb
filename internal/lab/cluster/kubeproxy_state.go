package cluster

import (
	"fmt"
	"os"
	"strings"
)

// kubeProxyTailLines is how much of a kube-proxy's log KubeProxyState
// quotes.
const kubeProxyTailLines = 12

// KubeProxyState says whether the kube-proxy of the lab's i-th node
// (Net.Nodes[i]) still runs and quotes the last lines of its log: for a
// failure that a node's Service rules explain (the API server reaches the
// webhooks through the first node's, the egress proxy's dialer), which the
// lab's work directory, removed at its end, would otherwise take along.
func (n *Network) KubeProxyState(i int) string {
	if n == nil || i < 0 || i >= len(n.kubeProxies) {
		return fmt.Sprintf("node %d has no kube-proxy", i)
	}
	k := n.kubeProxies[i]
	p, restarts := k.current()
	state := fmt.Sprintf("running (pid %d)", p.Pid())
	if p.Exited() {
		state = fmt.Sprintf("exited (code %d)", p.ExitCode())
	}
	if restarts > 0 {
		state += fmt.Sprintf(", started again %d times", restarts)
	}
	out := fmt.Sprintf("kube-proxy on %s: %s", k.node, state)
	b, err := os.ReadFile(k.log)
	if err != nil {
		return out + "; its log: " + err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > kubeProxyTailLines {
		lines = lines[len(lines)-kubeProxyTailLines:]
	}
	return out + "; its log's last lines:\n" + strings.Join(lines, "\n")
}
