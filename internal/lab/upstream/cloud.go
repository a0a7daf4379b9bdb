// Package upstream runs the real upstream service controller (the
// controllers/service package of k8s.io/cloud-provider, the control plane's
// version) with a cloud provider written here that programs the lab's
// HAProxy the way cloud-provider-azure programs an Azure Standard Load
// Balancer. It is lab machinery: the production binary does not link it.
//
// What it copies from cloud-provider-azure, and only that (docs/lab.md cites
// the sources):
//   - the backend pool is every node the service controller passes (Azure's
//     pool is the nodes' NICs or VMSS instances, for either traffic policy),
//     at the Service's nodePort;
//   - the health probe: for externalTrafficPolicy Local, HTTP GET /healthz on
//     the Service's healthCheckNodePort; for Cluster, TCP on the nodePort
//     (the default "servicenodeport" probe mode); every 5 s, 2 consecutive
//     results to change state (probeThreshold);
//   - a load balancer is written only when it differs from what is there:
//     EnsureLoadBalancer reads the load balancer, compares and writes the
//     difference, so a restart with nothing changed writes nothing;
//   - a node that leaves the pool leaves at once (no drain), and the load
//     balancer is deleted with its Service.
package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// ProviderName is the cloud provider's name as the service controller logs it.
const ProviderName = "zerodrop-lab-azure-like"

// Azure's defaults for a Service's health probe (cloud-provider-azure:
// consts.HealthProbeDefaultProbeInterval, HealthProbeDefaultNumOfProbe).
const (
	probeIntervalMillis = 5000
	probeThreshold      = 2
)

// Cloud is the cloudprovider.Interface of the lab: load balancers only.
type Cloud struct {
	lb *LoadBalancers
}

// NewCloud returns a cloud whose load balancers prov holds, with frontend
// addresses from pool.
func NewCloud(prov provider.Provider, pool netip.Prefix) *Cloud {
	return &Cloud{lb: &LoadBalancers{prov: prov, pool: pool, addrs: map[string]netip.Addr{}}}
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
	prov provider.Provider
	pool netip.Prefix

	mu    sync.Mutex
	addrs map[string]netip.Addr // Service key → frontend address
}

var _ cloudprovider.LoadBalancer = (*LoadBalancers)(nil)

func key(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// GetLoadBalancerName is the upstream default name ("a" and the Service's
// UID), the one cloud-provider-azure uses for a Service's rules.
func (l *LoadBalancers) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer reports whether HAProxy has the Service's load balancer.
func (l *LoadBalancers) GetLoadBalancer(ctx context.Context, _ string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := l.prov.Observe(ctx, key(svc))
	if err != nil || lb == nil || len(lb.Listeners) == 0 {
		return nil, false, err
	}
	return status(lb.Listeners[0].Address), true, nil
}

// EnsureLoadBalancer writes the Service's load balancer where it differs
// from what HAProxy has, and nothing when it does not.
func (l *LoadBalancers) EnsureLoadBalancer(ctx context.Context, _ string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	observed, err := l.prov.Observe(ctx, key(svc))
	if err != nil {
		return nil, fmt.Errorf("read load balancer %s: %w", key(svc), err)
	}
	addr, err := l.address(svc, observed)
	if err != nil {
		return nil, err
	}
	desired := Desired(svc, nodes, addr.String())
	if plan := model.Diff(observed, desired); !plan.Empty() {
		if err := l.prov.Apply(ctx, plan); err != nil {
			return nil, fmt.Errorf("write load balancer %s: %w", key(svc), err)
		}
	}
	return status(addr.String()), nil
}

// UpdateLoadBalancer is the service controller's call when the node set
// changes: the same comparison and write.
func (l *LoadBalancers) UpdateLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) error {
	_, err := l.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	return err
}

// EnsureLoadBalancerDeleted deletes the Service's load balancer.
func (l *LoadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, _ string, svc *corev1.Service) error {
	if err := l.prov.Delete(ctx, key(svc)); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", key(svc), err)
	}
	l.mu.Lock()
	delete(l.addrs, key(svc))
	l.mu.Unlock()
	return nil
}

// Desired is the load balancer cloud-provider-azure would build for svc:
// one rule per port, every node in the pool on the port's nodePort, the
// probe per traffic policy.
func Desired(svc *corev1.Service, nodes []*corev1.Node, addr string) *model.LoadBalancer {
	lb := &model.LoadBalancer{Key: key(svc)}
	for _, port := range svc.Spec.Ports {
		proto := port.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		probe := model.Probe{Kind: model.ProbeTCP, IntervalMillis: probeIntervalMillis, Rise: probeThreshold, Fall: probeThreshold}
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
			probe.Kind, probe.Port, probe.Path = model.ProbeHTTP, svc.Spec.HealthCheckNodePort, "/healthz"
		}
		l := model.Listener{Name: model.ListenerName(svc.Namespace, svc.Name, proto, port.Port), Address: addr,
			Port: port.Port, Protocol: model.Protocol(proto), Probe: probe}
		for _, n := range nodes {
			if ip := model.NodeAddress(n); ip != "" && port.NodePort != 0 {
				l.Backends = append(l.Backends, model.Backend{Address: ip, Port: port.NodePort, Weight: model.DefaultWeight, State: model.Active})
			}
		}
		lb.Listeners = append(lb.Listeners, l)
	}
	return model.Canonical(lb)
}

// address keeps a Service's frontend address: the one HAProxy has for it,
// else the one its status shows, else the first free one of the pool.
func (l *LoadBalancers) address(svc *corev1.Service, observed *model.LoadBalancer) (netip.Addr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key(svc)
	candidates := []string{}
	if observed != nil && len(observed.Listeners) > 0 {
		candidates = append(candidates, observed.Listeners[0].Address)
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		candidates = append(candidates, in.IP)
	}
	if a, ok := l.addrs[k]; ok {
		return a, nil
	}
	for _, c := range candidates {
		if a, err := netip.ParseAddr(c); err == nil && l.pool.Contains(a) && !l.used(a) {
			l.addrs[k] = a
			return a, nil
		}
	}
	for a := l.pool.Addr().Next(); l.pool.Contains(a); a = a.Next() {
		if !l.used(a) {
			l.addrs[k] = a
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("frontend pool %s exhausted", l.pool)
}

func (l *LoadBalancers) used(a netip.Addr) bool {
	for _, b := range l.addrs {
		if a == b {
			return true
		}
	}
	return false
}

func status(addr string) *corev1.LoadBalancerStatus {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: addr}}}
}
