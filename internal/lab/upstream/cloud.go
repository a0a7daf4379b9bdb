// Package upstream runs the real upstream service controller (the
// controllers/service package of k8s.io/cloud-provider, the control plane's
// version) with a cloud provider written here that programs the lab's
// HAProxy the way cloud-provider-azure programs an Azure Standard Load
// Balancer. It is lab machinery: the production binary does not link it.
//
// It shares no code with zerodrop: it writes HAProxy with its own writer
// (haproxy.go), and imports nothing of zerodrop's model or providers
// (imports_test.go keeps it so), so the baseline does not move with the
// system it is compared with.
//
// What it copies from cloud-provider-azure (pkg/provider, pkg/consts), and
// only that — a rule per Service port, every node in the pool at its
// nodePort, the health probe per traffic policy, the probe's interval and
// threshold, the rule's distribution and idle timeout, and a write only
// where the load balancer differs — is docs/lab.md's table of Azure
// behaviours, each with the function it comes from.
package upstream

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// ProviderName is the cloud provider's name as the service controller logs it.
const ProviderName = "zerodrop-lab-azure-like"

// Azure's defaults for a Service's health probe (cloud-provider-azure:
// consts.HealthProbeDefaultProbeInterval, HealthProbeDefaultNumOfProbe).
const (
	probeIntervalSeconds = 5
	probeThreshold       = 2
)

// Cloud is the cloudprovider.Interface of the lab: load balancers only.
type Cloud struct {
	lb *LoadBalancers
}

// NewCloud returns a cloud whose load balancers hap holds, with frontend
// addresses from pool.
func NewCloud(hap *HAProxy, pool netip.Prefix) *Cloud {
	return &Cloud{lb: &LoadBalancers{hap: hap, pool: pool}}
}

var _ cloudprovider.Interface = (*Cloud)(nil)

func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return c.lb, true }
func (c *Cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (c *Cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *Cloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (c *Cloud) ProviderName() string                                              { return ProviderName }
func (c *Cloud) HasClusterID() bool                                                { return true }

// LoadBalancers is the cloud's cloudprovider.LoadBalancer.
type LoadBalancers struct {
	hap  *HAProxy
	pool netip.Prefix

	// mu serialises the reconciles, as cloud-provider-azure's
	// serviceReconcileLock does.
	mu sync.Mutex
}

var _ cloudprovider.LoadBalancer = (*LoadBalancers)(nil)

// LoadBalancerName is a Service's load balancer name: the upstream default
// ("a" and the Service's UID without dashes), which cloud-provider-azure's
// GetLoadBalancerName returns and prefixes its rule names with.
func LoadBalancerName(svc *corev1.Service) string { return cloudprovider.DefaultLoadBalancerName(svc) }

// GetLoadBalancerName is LoadBalancerName.
func (l *LoadBalancers) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return LoadBalancerName(svc)
}

// GetLoadBalancer reports whether the cloud has the Service's load
// balancer, and its status.
func (l *LoadBalancers) GetLoadBalancer(_ context.Context, _ string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, _, err := l.hap.Read()
	if err != nil {
		return nil, false, err
	}
	lb := st.find(LoadBalancerName(svc))
	if lb == nil {
		return nil, false, nil
	}
	return status(lb.Address), true, nil
}

// EnsureLoadBalancer reads the load balancers, sets the Service's to what
// cloud-provider-azure would build for it and writes only when that
// differs from what HAProxy runs.
func (l *LoadBalancers) EnsureLoadBalancer(ctx context.Context, _ string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, _, err := l.hap.Read()
	if err != nil {
		return nil, fmt.Errorf("read load balancers: %w", err)
	}
	addr, err := l.address(st, svc)
	if err != nil {
		return nil, err
	}
	lb, err := Expected(svc, nodes, addr.String())
	if err != nil {
		return nil, err
	}
	st.put(lb)
	if _, err := l.hap.Apply(ctx, st); err != nil {
		return nil, fmt.Errorf("write load balancer %s (%s): %w", lb.Name, lb.Service, err)
	}
	return status(lb.Address), nil
}

// UpdateLoadBalancer is the service controller's call when the node set
// changes: cloud-provider-azure runs the same reconcile.
func (l *LoadBalancers) UpdateLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) error {
	_, err := l.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	return err
}

// EnsureLoadBalancerDeleted deletes the Service's load balancer; none is
// nothing to do.
func (l *LoadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *corev1.Service) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, _, err := l.hap.Read()
	if err != nil {
		return fmt.Errorf("read load balancers: %w", err)
	}
	if !st.remove(LoadBalancerName(svc)) {
		return nil
	}
	if _, err := l.hap.Apply(ctx, st); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", LoadBalancerName(svc), err)
	}
	return nil
}

// Expected is the load balancer cloud-provider-azure would build for svc on
// nodes, with frontend address addr: a rule per port, every node with an
// IPv4 InternalIP in the pool, the probe per traffic policy.
func Expected(svc *corev1.Service, nodes []*corev1.Node, addr string) (LB, error) {
	lb := LB{Name: LoadBalancerName(svc), Service: svc.Namespace + "/" + svc.Name, Address: addr}
	for _, n := range nodes {
		if ip := nodeAddress(n); ip != "" {
			lb.Pool = append(lb.Pool, Member{Node: n.Name, Address: ip})
		}
	}
	slices.SortFunc(lb.Pool, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	var healthCheck *Probe
	if servicehelpers.NeedsHealthCheck(svc) {
		if path, port := servicehelpers.GetServiceHealthCheckPathPort(svc); port != 0 {
			healthCheck = &Probe{Protocol: ProbeHTTP, Port: port, Path: path}
		}
	}
	for _, port := range svc.Spec.Ports {
		proto := port.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if proto != corev1.ProtocolTCP {
			return LB{}, fmt.Errorf("service %s port %d: protocol %s: the lab's HAProxy balances TCP only", lb.Service, port.Port, proto)
		}
		if port.NodePort == 0 {
			return LB{}, fmt.Errorf("service %s port %d has no nodePort", lb.Service, port.Port)
		}
		r := Rule{Name: fmt.Sprintf("%s-%s-%d", lb.Name, proto, port.Port), Port: port.Port, BackendPort: port.NodePort,
			Probe:    Probe{Protocol: ProbeTCP, Port: port.NodePort},
			SourceIP: svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP}
		if healthCheck != nil {
			r.Probe = *healthCheck
		}
		r.Probe.IntervalSeconds, r.Probe.Threshold = probeIntervalSeconds, probeThreshold
		lb.Rules = append(lb.Rules, r)
	}
	return lb, nil
}

// nodeAddress is a node's first IPv4 InternalIP (cloud-provider-azure's
// getNodePrivateIPAddress for the IPv4 pool), or "".
func nodeAddress(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip := net.ParseIP(a.Address); ip != nil && ip.To4() != nil {
				return a.Address
			}
		}
	}
	return ""
}

// address keeps a Service's frontend address: the one its load balancer
// has, else the one its status shows, else the first free one of the pool.
func (l *LoadBalancers) address(st State, svc *corev1.Service) (netip.Addr, error) {
	name := LoadBalancerName(svc)
	used := map[netip.Addr]bool{}
	for _, lb := range st.LoadBalancers {
		a, err := netip.ParseAddr(lb.Address)
		if err != nil {
			continue
		}
		if lb.Name == name {
			return a, nil
		}
		used[a] = true
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && l.pool.Contains(a) && !used[a] {
			return a, nil
		}
	}
	for a := l.pool.Masked().Addr().Next(); l.pool.Contains(a); a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("frontend pool %s exhausted", l.pool)
}

func status(addr string) *corev1.LoadBalancerStatus {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: addr}}}
}
