package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/bgp"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// A run's data plane behind the lab's FRR (--router frr-ecmp or
// frr-resilient): the lab routes nothing itself. Each load-balancer host's
// speaker (the chart's haproxy.bgp DaemonSet) announces the run's Service
// addresses it serves, and the router's routes are FRR's (or, resilient,
// the lab's programmer's from FRR's table). The run is steady only once the
// router routes the Service's address through every host the traffic
// reaches (routedView).

// startFRRRoutes readies the run's routing through FRR once the chart's
// data plane serves: the run's pool is unreachable in the router (more
// specific than the stand-in's route of the range, less than an announced
// address), so an address no node announces is not reached; and every
// node's session must be Established. The lab puts no address on the
// hosts: each speaker puts the Service addresses on its own link
// (haproxy.bgp.addressLink), which the lab's AnyIP route of the whole
// frontend range (no interface address) would not stand in for.
func (p *Plane) startFRRRoutes(ctx context.Context) error {
	// The run's pool, not the stand-in's route of the whole range: zebra
	// has adopted that route's nexthop group from the kernel, and a
	// route replaced under it leaves zebra holding the group, which it
	// then installs again when the lab deletes it (Plane.Stop's fresh
	// route to the first load balancer failed so).
	if err := p.cfg.FRR.host.Run(ctx, "ip", "route", "replace", "unreachable", cluster.FrontendPool(p.cfg.RunID)); err != nil {
		return err
	}
	n := len(p.cfg.Net.LBs)
	if err := traffic.WaitFor(ctx, 90*time.Second, "every node's BGP session with the router", func() (bool, string) {
		s, err := p.cfg.FRR.Sessions(ctx)
		if err != nil {
			return false, err.Error()
		}
		return Established(s) == n, fmt.Sprintf("%d of %d established", Established(s), n)
	}); err != nil {
		return err
	}
	p.cfg.Mark("every node's speaker has its BGP session with the router (%s)", p.cfg.FRR.Mode)
	return nil
}

// stopFRRRoutes takes the run's pool's unreachable route out of the
// router, deletes the speakers' address links from the hosts (a speaker
// leaves its addresses in place when it stops, for its successor), and
// puts the exclusion label back on their Nodes.
func (p *Plane) stopFRRRoutes(ctx context.Context) {
	if err := p.cfg.FRR.host.Run(ctx, "ip", "route", "del", "unreachable", cluster.FrontendPool(p.cfg.RunID)); err != nil {
		p.cfg.Logf("%s: remove the run's unreachable route from the router: %v", p.cfg.Name, err)
	}
	for _, h := range p.cfg.Net.LBs {
		// Gone already when no speaker ran there.
		if err := h.Run(ctx, "ip", "link", "del", bgp.DefaultAddressLink); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			p.cfg.Logf("%s: delete the speaker's link %s from %s: %v", p.cfg.Name, bgp.DefaultAddressLink, h.Name, err)
		}
	}
	if err := p.excludeHosts(ctx, true); err != nil {
		p.cfg.Logf("%s: label the data-plane Nodes again: %v", p.cfg.Name, err)
	}
}

// excludeHosts puts the exclusion label on the load-balancer hosts' Nodes
// (on) or takes it off. The lab labels them so from their registration,
// to keep them out of node-mode backends (they run no kube-proxy); the
// speaker reads the label as its node leaving and announces nothing, so a
// run behind FRR takes it off while it runs (and needs --backend ip) and
// puts it back at its end.
func (p *Plane) excludeHosts(ctx context.Context, on bool) error {
	value := "null"
	if on {
		value = `"true"`
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, model.LabelExcludeFromLB, value))
	var errs []error
	for i := range p.cfg.Net.LBs {
		if _, err := p.cfg.Client.CoreV1().Nodes().Patch(ctx, cluster.HostNodeName(i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// frrHosts are the load-balancer hosts (indices, sorted) through which the
// router's kernel routes the run's pool, each route's next hops joined.
func (p *Plane) frrHosts(ctx context.Context, addr netip.Addr) ([]int, error) {
	pool := netip.MustParsePrefix(cluster.FrontendPool(p.cfg.RunID))
	if addr.IsValid() {
		pool = netip.PrefixFrom(addr, 32)
	}
	routes, err := NextHops(ctx, p.cfg.FRR.host.Name, pool)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, hops := range routes {
		for _, h := range hops {
			for i, lb := range p.cfg.Net.LBs {
				if lb.IP == h {
					out = append(out, i)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// frrRouted: the router routes the run's addresses through n hosts.
func (p *Plane) frrRouted(n int) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hosts, err := p.frrHosts(ctx, netip.Addr{})
	if err != nil {
		return false, err.Error()
	}
	return len(hosts) == n, fmt.Sprintf("the router routes the run's addresses through hosts %v, want %d hosts", hosts, n)
}

// serviceAddress is the ingress address of the Service key (namespace/name).
func (p *Plane) serviceAddress(ctx context.Context, key string) (netip.Addr, error) {
	ns, name, _ := strings.Cut(key, "/")
	svc, err := p.cfg.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("service %s has no ingress address yet", key)
}

// routedView is v, replica d's view, that with FRR also fails until the
// router routes the Service key's address through d's host: a run is
// steady, and its traffic starts, only once every node's speaker has
// announced it.
func (p *Plane) routedView(v world.View, d *Replica, key string) world.View {
	if p.cfg.FRR == nil {
		return v
	}
	backends := v.Backends
	v.Backends = func(ctx context.Context) ([]provider.BackendStatus, error) {
		addr, err := p.serviceAddress(ctx, key)
		if err != nil {
			return nil, err
		}
		hosts, err := p.frrHosts(ctx, addr)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(hosts, d.index) {
			return nil, fmt.Errorf("the router does not route %s through host %d (it does through %v)", addr, d.index, hosts)
		}
		return backends(ctx)
	}
	return v
}
