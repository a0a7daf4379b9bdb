// Package netlab builds the lab's network out of namespaces it makes: a fabric
// namespace with a bridge, node namespaces on that bridge with node IPs and pod
// CIDRs, pod namespaces bridged into their node, and hosts (load balancer,
// clients) on the fabric. Nothing is made in the root namespace except the
// namespace bind mounts themselves, every name carries a per-run prefix, and
// Close removes everything, also after a setup that failed halfway. See
// docs/lab-network.md.
package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
)

// NamePrefix starts every namespace name netlab makes: NamePrefix-PID-RANDOM-…,
// so parallel runs never collide and RemoveStale can tell a dead run's leftovers.
const NamePrefix = "zdlab"

// OwnName is a namespace name of this process's: NamePrefix, its PID, then
// suffix. The teardown checks of other live runs leave it out
// (testutil.RootState), and RemoveStale removes it once the process is
// gone; a test that makes a namespace of its own names it so too.
func OwnName(suffix string) string {
	return fmt.Sprintf("%s-%d-%s", NamePrefix, os.Getpid(), suffix)
}

// Addresses: the RFC 2544 benchmarking range, which nothing real uses; and it
// only ever exists inside lab-made namespaces. Node and host IPs are in
// fabricNet, pod CIDRs in 198.19.0.0/16 (a /24 per node: addNode).
var fabricNet = netip.MustParsePrefix("198.18.0.0/16")

// MaxNodes is bounded by the /24 pod CIDRs in 198.19.0.0/16 and node IPs in 198.18.0.0/24.
const MaxNodes = 200

// Config is the topology New makes.
type Config struct {
	// Nodes is the number of node namespaces (at least 1, at most MaxNodes).
	Nodes int
	// testHook, when set, runs before each setup step; an error it returns
	// makes that step fail (tests inject failures halfway through setup).
	testHook func(step string) error
}

// Lab is a running topology. Its methods are safe for concurrent use.
type Lab struct {
	Prefix string
	Fabric *Netns
	Nodes  []*Node

	hook func(step string) error

	mu       sync.Mutex
	cleanups []cleanup
	closed   bool
	closeErr error
	seq      int // names and addresses of pods and hosts
	hosts    int
}

type cleanup struct {
	what string
	fn   func() error
}

// Node is a node namespace: eth0 on the fabric with the node IP, and a bridge
// cbr0 holding the first address of its pod CIDR (the pods' gateway).
type Node struct {
	*Netns
	Index   int // 1-based
	IP      netip.Addr
	PodCIDR netip.Prefix
	nextPod int
}

// Pod is a pod namespace with eth0 bridged into its node and an IP from the
// node's pod CIDR.
type Pod struct {
	*Netns
	Node *Node
	IP   netip.Addr
	lab  *Lab
	once sync.Once
	err  error
}

// Host is a namespace on the fabric that is not a node (a load balancer, the
// clients, the control plane), routed to every pod CIDR through its node.
type Host struct {
	*Netns
	IP netip.Addr
}

// New makes the fabric and cfg.Nodes nodes with routes between their pod
// CIDRs. On error everything made so far is already removed.
func New(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return nil, fmt.Errorf("netlab: %d nodes, want 1 to %d", cfg.Nodes, MaxNodes)
	}
	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("netlab: run prefix: %w", err)
	}
	l := &Lab{
		Prefix: OwnName(hex.EncodeToString(rnd[:])),
		hook:   cfg.testHook,
	}
	defer func() {
		if err != nil {
			if cerr := l.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("teardown after failed setup: %w", cerr))
			}
		}
	}()
	if l.Fabric, err = l.addNetns(ctx, "fabric"); err != nil {
		return nil, err
	}
	if err := l.step(ctx, "fabric bridge", func() error {
		return ipAll(ctx, l.Fabric,
			"link add br0 type bridge",
			"link set br0 up",
			"link set lo up")
	}); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Nodes; i++ {
		n, err := l.addNode(ctx, i)
		if err != nil {
			return nil, err
		}
		l.Nodes = append(l.Nodes, n)
	}
	// Routes between nodes' pod CIDRs via node IPs, as a cloud's VPC routes do.
	for _, n := range l.Nodes {
		for _, other := range l.Nodes {
			if other == n {
				continue
			}
			if err := l.step(ctx, fmt.Sprintf("node %d route to %s", n.Index, other.PodCIDR), func() error {
				return ip(ctx, "-n", n.Name, "route", "add", other.PodCIDR.String(), "via", other.IP.String())
			}); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func (l *Lab) addNode(ctx context.Context, i int) (*Node, error) {
	ns, err := l.addNetns(ctx, fmt.Sprintf("node%d", i))
	if err != nil {
		return nil, err
	}
	n := &Node{
		Netns:   ns,
		Index:   i,
		IP:      netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)}),
		PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 0}), 24),
		nextPod: 2,
	}
	gw := n.PodCIDR.Addr().Next()
	err = l.step(ctx, fmt.Sprintf("node %d links", i), func() error {
		return veth(ctx, l.Fabric, "br0", "n"+strconv.Itoa(i), ns,
			"link set lo up",
			"addr add "+netip.PrefixFrom(n.IP, fabricNet.Bits()).String()+" dev eth0",
			"link set eth0 up",
			"link add cbr0 type bridge",
			"addr add "+netip.PrefixFrom(gw, n.PodCIDR.Bits()).String()+" dev cbr0",
			"link set cbr0 up")
	})
	if err != nil {
		return nil, err
	}
	if err := l.step(ctx, fmt.Sprintf("node %d ip_forward", i), func() error {
		return ns.SetSysctl(ctx, "net.ipv4.ip_forward", "1")
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// AddPod makes a pod namespace on node n with the next free IP of its pod
// CIDR. Pod.Close removes it early; Lab.Close removes whatever is left.
func (l *Lab) AddPod(ctx context.Context, n *Node) (*Pod, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netlab: lab is closed")
	}
	if n.nextPod > 254 {
		l.mu.Unlock()
		return nil, fmt.Errorf("netlab: node %d: pod CIDR %s is full", n.Index, n.PodCIDR)
	}
	host := n.nextPod
	n.nextPod++
	l.seq++
	seq := l.seq
	l.mu.Unlock()

	ns, err := l.addNetns(ctx, fmt.Sprintf("pod%d", seq))
	if err != nil {
		return nil, err
	}
	p := &Pod{Netns: ns, Node: n, IP: netip.AddrFrom4([4]byte{198, 19, byte(n.Index), byte(host)}), lab: l}
	gw := n.PodCIDR.Addr().Next()
	err = l.step(ctx, fmt.Sprintf("pod %d links", seq), func() error {
		return veth(ctx, n.Netns, "cbr0", "p"+strconv.Itoa(seq), ns,
			"link set lo up",
			"addr add "+netip.PrefixFrom(p.IP, n.PodCIDR.Bits()).String()+" dev eth0",
			"link set eth0 up",
			"route add default via "+gw.String())
	})
	if err != nil {
		// The pod's namespace stays registered with the lab; remove it now so a
		// failed pod does not linger until Close.
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// Close removes the pod's namespace (and with it both ends of its veth).
// Processes started in it must be stopped first. Idempotent.
func (p *Pod) Close() error {
	p.once.Do(func() { p.err = deleteNetns(p.Name) })
	return p.err
}

// AddHost makes a namespace on the fabric with an IP from 198.18.1.0/24 and
// routes to every node's pod CIDR through that node (so an IP-mode load
// balancer reaches pod IPs).
func (l *Lab) AddHost(ctx context.Context, name string) (*Host, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netlab: lab is closed")
	}
	l.hosts++
	idx := l.hosts
	l.seq++
	seq := l.seq
	l.mu.Unlock()
	if idx > 250 {
		return nil, errors.New("netlab: too many hosts")
	}
	ns, err := l.addNetns(ctx, name)
	if err != nil {
		return nil, err
	}
	h := &Host{Netns: ns, IP: netip.AddrFrom4([4]byte{198, 18, 1, byte(idx + 1)})}
	err = l.step(ctx, "host "+name+" links", func() error {
		cmds := []string{"link set lo up", "addr add " + netip.PrefixFrom(h.IP, fabricNet.Bits()).String() + " dev eth0", "link set eth0 up"}
		for _, n := range l.Nodes {
			cmds = append(cmds, "route add "+n.PodCIDR.String()+" via "+n.IP.String())
		}
		if err := veth(ctx, l.Fabric, "br0", "h"+strconv.Itoa(seq), ns, cmds...); err != nil {
			return err
		}
		// A load-balancer host is set up as the chart README asks of a
		// data-plane node: connections queued on a listener an old
		// HAProxy closes at its soft stop move to the new HAProxy's
		// listener of the same port (SO_REUSEPORT) instead of being reset.
		return ns.SetSysctl(ctx, "net.ipv4.tcp_migrate_req", "1")
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// addNetns registers the namespace's removal and then makes it, so a crash
// between the two never leaves an unregistered namespace.
func (l *Lab) addNetns(ctx context.Context, suffix string) (*Netns, error) {
	ns := &Netns{Name: l.Prefix + "-" + suffix}
	if err := l.onClose("netns "+ns.Name, func() error { return deleteNetns(ns.Name) }); err != nil {
		return nil, err
	}
	if err := l.step(ctx, "netns "+suffix, func() error { return ip(ctx, "netns", "add", ns.Name) }); err != nil {
		return nil, err
	}
	return ns, nil
}

// step runs one setup step, after the test hook (which may fail it).
func (l *Lab) step(ctx context.Context, what string, fn func() error) error {
	err := ctx.Err()
	if err == nil && l.hook != nil {
		err = l.hook(what)
	}
	if err == nil {
		err = fn()
	}
	if err != nil {
		return fmt.Errorf("netlab: %s: %w", what, err)
	}
	return nil
}

// onClose registers fn to run at Close (last registered runs first). It fails
// once the lab is closed, so nothing is made that Close would miss.
func (l *Lab) onClose(what string, fn func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("netlab: lab is closed")
	}
	l.cleanups = append(l.cleanups, cleanup{what, fn})
	return nil
}

// Close stops every process and removes every namespace the lab made, in
// reverse order of creation. It runs every step even when one fails and is
// idempotent: later calls return the first call's result.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return l.closeErr
	}
	l.closed = true
	cleanups := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()

	var errs []error
	for i := len(cleanups) - 1; i >= 0; i-- {
		if err := cleanups[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cleanups[i].what, err))
		}
	}
	err := errors.Join(errs...)
	l.mu.Lock()
	l.closeErr = err
	l.mu.Unlock()
	return err
}

// deleteNetns removes a namespace; one that is already gone is fine.
// Deleting it removes its links, routes, nftables tables and sysctls: they
// all belong to the namespace.
func deleteNetns(name string) error {
	_, err := runIP("netns", "del", name)
	if err != nil {
		if _, statErr := os.Stat("/run/netns/" + name); os.IsNotExist(statErr) {
			return nil
		}
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// veth links ns to the bridge of parent (the fabric's br0, a node's cbr0):
// a veth made in parent, named link there, with its peer created straight
// in ns as eth0 — it never exists in the root namespace, and deleting
// either namespace removes both ends — then runs cmds in ns (ipAll).
func veth(ctx context.Context, parent *Netns, bridge, link string, ns *Netns, cmds ...string) error {
	if err := ip(ctx, "-n", parent.Name, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns.Name); err != nil {
		return err
	}
	if err := ipAll(ctx, parent, "link set "+link+" master "+bridge, "link set "+link+" up"); err != nil {
		return err
	}
	return ipAll(ctx, ns, cmds...)
}

// ipAll runs `ip -n NS <cmd>` for each command, stopping at the first error.
func ipAll(ctx context.Context, ns *Netns, cmds ...string) error {
	for _, c := range cmds {
		if err := ip(ctx, append([]string{"-n", ns.Name}, strings.Fields(c)...)...); err != nil {
			return err
		}
	}
	return nil
}
