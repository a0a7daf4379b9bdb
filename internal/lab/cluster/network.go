package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// The lab's addresses (docs/lab.md, "The network"). Everything lives in
// namespaces the lab makes (internal/lab/netlab); the root namespace only has
// the control plane on its loopback.
const (
	// serviceCIDR is the API server's service range; the drain Service's
	// fixed ClusterIP is in it, as deploy/ expects a cluster's usual range.
	serviceCIDR = "10.96.0.0/16"
	// drainClusterIP is the drain Service's fixed ClusterIP (deploy/ uses
	// the same), given to the webhook as the preStop hook's host.
	DrainClusterIP = "10.96.0.90"
	// FrontendNet holds every run's frontend address pool (a /24 each):
	// local on the load balancer namespace's loopback, routed to it from the
	// client namespace.
	FrontendNet = "198.18.128.0/17"
	// apiserverInNetns is where namespaces that need the API server reach
	// it: a forwarder on their own loopback (the certificate is valid for
	// 127.0.0.1), since the API server listens on the root namespace's.
	APIServerInNetns = "127.0.0.1:6443"
	// kubeProxyHealthzPort is kube-proxy's --healthz-bind-address port.
	kubeProxyHealthzPort = 10256
)

// network is the lab's network: nodes with the real kube-proxy, and the
// load balancer, client and admin hosts.
type Network struct {
	Net *netlab.Lab
	// lb runs HAProxy; client runs the traffic; admin is the lab's own
	// view (metrics scrapes, pod checks) so that neither counts it.
	LB, Client, Admin *netlab.Host
	// lbs are the data-plane replicas' hosts (--data-plane-replicas): lb
	// first. The client reaches the frontend range through a resilient
	// nexthop group over them (routeTo chooses its members).
	LBs []*netlab.Host
	// Router forwards the client's frontend traffic to LBs through the
	// nexthop group, when there are several (nil: the client routes to
	// its one load balancer itself). A router of its own, as in a real
	// network: in the client's namespace the group hashed the client's
	// own packets, and the replies TCP sends outside the socket (the ACK
	// of a TIME_WAIT, a reset) now and then left through another member
	// than the connection's, so a load-balancer host never saw the
	// connection's end and answered the port's next connection with the
	// old one's ACK: a request timed out (lb-update at c6f29ae, packet
	// captures of the client and the three hosts). Forwarded packets
	// are hashed from their headers, all alike.
	Router *netlab.Host
	// routerClose are what a world started in the router's namespace (the
	// lab's FRR), ended before the network is taken down (AtClose).
	routerClose []func()
	apiserver   string // host:port of the API server in the root namespace
	Kubeconfig  string // kubeconfig for processes in lab namespaces
	// kubeProxies are the nodes' kube-proxies, by node (kubeproxy.go),
	// each started again when it exits until kubeProxyStop is closed.
	kubeProxies   []*kubeProxy
	kubeProxyStop chan struct{}
	kubeProxyWG   sync.WaitGroup
	stopOnce      sync.Once
}

// startNetwork makes the namespaces, routes the frontend range, and starts
// kube-proxy on every node. On error the caller closes what was made.
func StartNetwork(ctx context.Context, dir string, nodes, lbHosts int, cfg *rest.Config, logf func(string, ...any)) (*Network, error) {
	if err := netlab.RemoveStale(); err != nil {
		logf("netlab: removing a dead run's namespaces: %v", err)
	}
	nl, err := netlab.New(ctx, netlab.Config{Nodes: nodes})
	if err != nil {
		return nil, err
	}
	n := &Network{Net: nl, kubeProxyStop: make(chan struct{})}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return n, fmt.Errorf("API server address %q: %w", cfg.Host, err)
	}
	n.apiserver = u.Host
	for _, h := range []struct {
		name string
		dst  **netlab.Host
	}{{"lb", &n.LB}, {"client", &n.Client}, {"admin", &n.Admin}} {
		if *h.dst, err = nl.AddHost(ctx, h.name); err != nil {
			return n, err
		}
	}
	if err := n.addLBHosts(ctx, lbHosts); err != nil {
		return n, err
	}
	if n.Kubeconfig, err = WriteKubeconfig(cfg, "https://"+APIServerInNetns, filepath.Join(dir, "kubeconfig-netns")); err != nil {
		return n, err
	}
	// A data-plane replica's zerodrop process runs in its host's namespace.
	if lbHosts > 1 {
		for _, h := range n.LBs {
			if _, err := nl.Forward(h.Netns, APIServerInNetns, n.apiserver); err != nil {
				return n, fmt.Errorf("%s: API server forwarder: %w", h.Name, err)
			}
		}
	}
	if err := n.startKubeProxies(ctx, dir, logf); err != nil {
		return n, err
	}
	return n, nil
}

// addLBHosts adds the data-plane replicas' hosts after the first load
// balancer and routes the frontend range to them all.
func (n *Network) addLBHosts(ctx context.Context, lbHosts int) error {
	n.LBs = []*netlab.Host{n.LB}
	for i := 2; i <= lbHosts; i++ {
		h, err := n.Net.AddHost(ctx, fmt.Sprintf("lb%d", i))
		if err != nil {
			return err
		}
		n.LBs = append(n.LBs, h)
	}
	// Each load balancer answers every frontend address (an AnyIP route:
	// the whole range is local on its loopback), as each replica of an
	// anycast data plane holds every address; the client reaches them
	// through a nexthop group, as a router with ECMP routes to the replicas
	// would: hashed on the 5-tuple (fib_multipath_hash_policy 1), and
	// resilient, so a member taken out moves only its own flows.
	if lbHosts > 1 {
		if err := n.addRouter(ctx); err != nil {
			return err
		}
	}
	for i, h := range n.LBs {
		if err := h.Run(ctx, "ip", "addr", "add", FrontendNet, "dev", "lo"); err != nil {
			return err
		}
		if err := n.groupHost().Run(ctx, "ip", "nexthop", "add", "id", strconv.Itoa(i+1), "via", h.IP.String(), "dev", "eth0"); err != nil {
			return err
		}
	}
	if err := n.groupHost().Run(ctx, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"); err != nil {
		return err
	}
	return n.addFrontendGroup(ctx, []int{0})
}

// addRouter adds the router host (Network.Router) and routes the client's
// frontend traffic through it. It forwards on the fabric it came in on, so
// it sends no redirects (the client would then send to a host directly,
// outside the group) and the client takes none; the hosts answer the
// client directly.
func (n *Network) addRouter(ctx context.Context) error {
	r, err := n.Net.AddHost(ctx, "router")
	if err != nil {
		return err
	}
	n.Router = r
	for _, kv := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.ipv4.conf.all.send_redirects", "0"},
		{"net.ipv4.conf.default.send_redirects", "0"}, {"net.ipv4.conf.eth0.send_redirects", "0"}} {
		if err := r.SetSysctl(ctx, kv[0], kv[1]); err != nil {
			return err
		}
	}
	for _, key := range []string{"net.ipv4.conf.all.accept_redirects", "net.ipv4.conf.eth0.accept_redirects"} {
		if err := n.Client.SetSysctl(ctx, key, "0"); err != nil {
			return err
		}
	}
	return n.Client.Run(ctx, "ip", "route", "add", FrontendNet, "via", r.IP.String(), "dev", "eth0")
}

// groupHost is the namespace holding the nexthop group: the router, or
// the client when there is none.
func (n *Network) groupHost() *netlab.Host {
	if n.Router != nil {
		return n.Router
	}
	return n.Client
}

// nodeFor returns the netlab node of a lab Node's name.
func (n *Network) nodeFor(name string) *netlab.Node {
	for _, node := range n.Net.Nodes {
		if NodeName(node.Index) == name {
			return node
		}
	}
	return nil
}

// close stops every process in the lab's namespaces and removes them.
func (n *Network) Close() error {
	if n == nil || n.Net == nil {
		return nil
	}
	// The kube-proxies' keepers first: the lab's Close ends their
	// processes, which they would start again.
	n.stopKubeProxies()
	for _, fn := range slices.Backward(n.routerClose) {
		fn()
	}
	n.routerClose = nil
	return n.Net.Close()
}

// AtClose has Close call fn first, before the lab's processes are stopped
// and its namespaces removed: a router daemon's own cleanup (its
// directories outside the lab's).
func (n *Network) AtClose(fn func()) { n.routerClose = append(n.routerClose, fn) }

// NodeName is lab node i's name: "lab-node-" and i in six base-36 digits,
// the form of a scale-set instance's computer name (a prefix and the
// instance ID so), which cloud-provider-azure requires of a node it finds
// in a scale set by its name (getScaleSetVMInstanceID,
// pkg/provider/azure_vmss.go 742-754): the Azure world can make each node
// the scale-set instance of its index.
func NodeName(i int) string {
	id := strconv.FormatInt(int64(i), 36)
	return "lab-node-" + strings.Repeat("0", max(0, 6-len(id))) + id
}

// frontendGroup is the client's nexthop group to the load balancers.
const frontendGroup = 100

// routeTo makes the client send the frontend range to the load balancers
// lbs[i] for i in members. fresh makes the group anew, its buckets spread
// evenly (between runs, with no traffic); otherwise the group is changed in
// place, as a router does when a replica's route is withdrawn or announced
// again: the buckets of a member taken out move to those that stay, and a
// member added gets only buckets idle for the group's idle timer (120 s),
// so no established flow moves.
func (n *Network) RouteTo(ctx context.Context, fresh bool, members ...int) error {
	if !fresh {
		return n.nexthopGroup(ctx, "replace", members)
	}
	if err := n.groupHost().Run(ctx, "ip", "route", "del", FrontendNet); err != nil {
		return err
	}
	// With FRR in the router (--router frr-*), zebra has adopted the
	// group of the route just deleted and may install it again when the
	// group goes, before it has seen the route go: delete it again until
	// the new one can be made.
	for try := 1; ; try++ {
		if err := n.groupHost().Run(ctx, "ip", "nexthop", "del", "id", strconv.Itoa(frontendGroup)); err != nil && try == 1 {
			return err
		}
		err := n.nexthopGroup(ctx, "add", members)
		if err == nil {
			break
		}
		if try == 20 || !strings.Contains(err.Error(), "File exists") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n.groupHost().Run(ctx, "ip", "route", "add", FrontendNet, "nhid", strconv.Itoa(frontendGroup))
}

// addFrontendGroup makes the client's group over members and routes the
// frontend range through it.
func (n *Network) addFrontendGroup(ctx context.Context, members []int) error {
	if err := n.nexthopGroup(ctx, "add", members); err != nil {
		return err
	}
	return n.groupHost().Run(ctx, "ip", "route", "add", FrontendNet, "nhid", strconv.Itoa(frontendGroup))
}

// nexthopGroup runs `ip nexthop verb` for the client's resilient group over
// the load balancers lbs[i] for i in members (nexthop i+1, addLBHosts).
func (n *Network) nexthopGroup(ctx context.Context, verb string, members []int) error {
	ids := make([]string, len(members))
	for k, i := range members {
		ids[k] = strconv.Itoa(i + 1)
	}
	return n.groupHost().Run(ctx, "ip", "nexthop", verb, "id", strconv.Itoa(frontendGroup), "group", strings.Join(ids, "/"), "type", "resilient", "buckets", "64")
}

// frontendPool is run k's frontend address pool.
func FrontendPool(k int) string {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(128 + k%100), 0}), 24).String()
}

// writeKubeconfig writes cfg's credentials for the API server at server.
func WriteKubeconfig(cfg *rest.Config, server, path string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["lab"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab"}
	kc.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}
