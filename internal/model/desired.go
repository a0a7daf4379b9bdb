package model

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ServiceInput is one Service that maps to a load balancer, with what the
// desired state is built from.
type ServiceInput struct {
	Service *corev1.Service
	// Slices are the Service's EndpointSlices (label kubernetes.io/service-name).
	Slices []*discoveryv1.EndpointSlice
	// Address is the frontend address the Service has been given.
	Address string
	Config  ServiceConfig
}

// DesiredOptions are the controller-wide inputs of the builder.
type DesiredOptions struct {
	// Nodes are the cluster's nodes (node mode backends).
	Nodes []*corev1.Node
	// Unsupported protocols are left out with a warning (HAProxy has no UDP).
	Unsupported map[Protocol]bool
	// AddressMap rewrites backend addresses (see AddressMapping).
	AddressMap []AddressMapping
	// GatePending reports an endpoint that is not ready only because
	// zerodrop's readiness gate waits for the load balancer: it must be
	// registered for the gate ever to open (invariant 5).
	GatePending func(discoveryv1.Endpoint) bool
	// KubeProxyHealthzPort is kube-proxy's healthz port on every node
	// (--healthz-bind-address, 10256 by default): node-mode listeners of
	// externalTrafficPolicy Cluster probe GET /healthz there, which answers
	// 503 when kube-proxy is unhealthy or the node is going away (KEP-3836),
	// as cloud load balancers probe Cluster Services. 0 probes the nodePort
	// over TCP instead, which fails on every node while the Service has no
	// ready endpoint (kube-proxy rejects), so a readiness gate that waits for
	// the load balancer could never open.
	KubeProxyHealthzPort int32
	// ProbeDecidesLocal: node-mode listeners of externalTrafficPolicy Local
	// keep every node NodeExcluded leaves in active, with or without a
	// local endpoint, and leave a node without a ready one to the probe on
	// healthCheckNodePort, which kube-proxy fails there (as
	// cloud-provider-azure does: its pools hold the nodes whatever their
	// endpoints). For a provider whose writes are slower than its probe's
	// fall count (provider.ProbeDecider: Azure); false drains such a node
	// at once (nodeBackends).
	ProbeDecidesLocal bool
}

// Warning is a problem with one Service that the builder worked around.
type Warning struct {
	Service string
	Reason  string
	Message string
}

// LabelExcludeFromLB is the well-known node label that keeps a node out of
// load balancer pools.
const LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"

// TaintToBeDeletedByClusterAutoscaler is the taint the cluster autoscaler
// puts on a node it is about to delete.
const TaintToBeDeletedByClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"

// ListenerName is the stable name of a Service port's listener.
func ListenerName(namespace, name string, proto corev1.Protocol, port int32) string {
	return fmt.Sprintf("%s/%s/%s-%d", namespace, name, strings.ToLower(string(proto)), port)
}

// Desired builds the load balancer that the given Services ask for. It is pure:
// same inputs, same output, whatever order they came in.
func Desired(key string, services []ServiceInput, opts DesiredOptions) (*LoadBalancer, []Warning) {
	lb := &LoadBalancer{Key: key}
	var warnings []Warning
	for _, in := range services {
		svc := in.Service
		svcKey := svc.Namespace + "/" + svc.Name
		for _, port := range svc.Spec.Ports {
			proto := Protocol(port.Protocol)
			if proto == "" {
				proto = TCP
			}
			if opts.Unsupported[proto] {
				warnings = append(warnings, Warning{Service: svcKey, Reason: "UnsupportedProtocol",
					Message: fmt.Sprintf("port %d/%s: the load balancer does not support %s; the port is not exposed", port.Port, proto, proto)})
				continue
			}
			l := Listener{
				Name:     ListenerName(svc.Namespace, svc.Name, corev1.Protocol(proto), port.Port),
				Address:  in.Address,
				Port:     port.Port,
				Protocol: proto,
				Probe: Probe{
					Kind:           ProbeTCP,
					IntervalMillis: int32(in.Config.HealthCheckInterval.Milliseconds()),
					Rise:           DefaultRise,
					Fall:           DefaultFall,
				},
			}
			switch in.Config.Mode {
			case NodeMode:
				if port.NodePort == 0 {
					warnings = append(warnings, Warning{Service: svcKey, Reason: "NoNodePort",
						Message: fmt.Sprintf("port %d/%s has no nodePort; node mode needs one", port.Port, proto)})
					continue
				}
				if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
					// kube-proxy answers on healthCheckNodePort only on nodes that
					// have a ready local endpoint.
					l.Probe.Kind, l.Probe.Port, l.Probe.Path = ProbeHTTP, svc.Spec.HealthCheckNodePort, "/healthz"
				} else if opts.KubeProxyHealthzPort != 0 {
					l.Probe.Kind, l.Probe.Port, l.Probe.Path = ProbeHTTP, opts.KubeProxyHealthzPort, "/healthz"
				}
				var local map[string]bool
				if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && !opts.ProbeDecidesLocal {
					local = localNodes(in.Slices, sliceAddressType(svc))
				}
				l.Backends = nodeBackends(opts.Nodes, port.NodePort, local)
			default:
				l.Backends = endpointBackends(in.Slices, port, sliceAddressType(svc), opts.GatePending)
			}
			for i := range l.Backends {
				l.Backends[i].Address = MapAddress(opts.AddressMap, l.Backends[i].Address)
			}
			lb.Listeners = append(lb.Listeners, l)
		}
	}
	return Canonical(lb), warnings
}

// nodeBackends lists the nodes a node-mode listener sends to. With local
// (externalTrafficPolicy Local: the names of the nodes that have an endpoint
// of the Service that is not terminating), a node without one is kept in the
// pool draining: its last local pod is stopping, or it has none, and
// kube-proxy would send new connections only to a terminating pod or
// nowhere. Its health check (the healthCheckNodePort) fails too, but only
// after the probe's fall count; draining takes effect at once. The node stays
// registered so that a pod starting there finds it (the readiness gate waits
// for the node's backend to be active, never for its health: invariant 5).
// Without local (Cluster, or Local where the probe decides:
// DesiredOptions.ProbeDecidesLocal) every node is active.
func nodeBackends(nodes []*corev1.Node, nodePort int32, local map[string]bool) []Backend {
	var out []Backend
	for _, n := range nodes {
		if NodeExcluded(n) {
			continue
		}
		if ip := NodeAddress(n); ip != "" {
			b := Backend{Address: ip, Port: nodePort, Weight: DefaultWeight, State: Active}
			if local != nil && !local[n.Name] {
				b.State, b.Weight = Draining, 0
			}
			out = append(out, b)
		}
	}
	return out
}

// localNodes names the nodes that have an endpoint of the Service that is not
// terminating, ready or not yet: a pod that starts makes its node active
// before it is ready, so the readiness gate that waits for it can open.
func localNodes(slices []*discoveryv1.EndpointSlice, family discoveryv1.AddressType) map[string]bool {
	out := map[string]bool{}
	for _, s := range slices {
		if s.AddressType == discoveryv1.AddressTypeFQDN || family != "" && s.AddressType != "" && s.AddressType != family {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil && (ep.Conditions.Terminating == nil || !*ep.Conditions.Terminating) {
				out[*ep.NodeName] = true
			}
		}
	}
	return out
}

// NodeExcluded reports whether a node leaves the node-mode backends. As the
// upstream service controller since KEP-3458 (StableLoadBalancerNodeSet), only
// the exclusion label, the cluster autoscaler's deletion taint and the node's
// deletion count. Readiness and cordons do not: a control-plane partition marks
// every node Unknown, and draining them all would take the service down while
// the nodes still serve. The probes decide health (healthCheckNodePort for
// externalTrafficPolicy Local, the nodePort for Cluster).
func NodeExcluded(n *corev1.Node) bool {
	if _, excluded := n.Labels[LabelExcludeFromLB]; excluded || n.DeletionTimestamp != nil {
		return true
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeletedByClusterAutoscaler {
			return true
		}
	}
	return false
}

// StayingNodes are the backend addresses (mapped as Desired maps them) of
// the nodes NodeExcluded takes out whose Node is not being deleted: marked
// leaving by the exclusion label or the cluster autoscaler's deletion
// taint, they still run kube-proxy and forward established connections
// (StepOptions.Stays). The autoscaler drains such a node's pods and then
// deletes it; a drain timeout cutting its connections first would break
// what the node still carries.
func StayingNodes(nodes []*corev1.Node, mappings []AddressMapping) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		if NodeExcluded(n) && n.DeletionTimestamp == nil {
			if ip := NodeAddress(n); ip != "" {
				out[MapAddress(mappings, ip)] = true
			}
		}
	}
	return out
}

// NodeAddress is the address a load balancer reaches a node on.
func NodeAddress(n *corev1.Node) string {
	for _, want := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == want {
				return a.Address
			}
		}
	}
	return ""
}

// endpointBackends lists the endpoints of one Service port. Ready endpoints
// are active; terminating endpoints that still serve are draining, so that
// their established connections continue (invariant 3).
func endpointBackends(slices []*discoveryv1.EndpointSlice, port corev1.ServicePort, family discoveryv1.AddressType, gatePending func(discoveryv1.Endpoint) bool) []Backend {
	byID := map[string]Backend{}
	for _, s := range slices {
		// An FQDN is no address a load balancer can send to, and the other
		// family's slices of a dual-stack Service list the same pods again.
		if s.AddressType == discoveryv1.AddressTypeFQDN || family != "" && s.AddressType != "" && s.AddressType != family {
			continue
		}
		var target int32
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			portProto := port.Protocol
			if portProto == "" {
				portProto = corev1.ProtocolTCP
			}
			if name == port.Name && proto == portProto && p.Port != nil {
				target = *p.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			state, ok := endpointState(ep.Conditions)
			if !ok && gatePending != nil && gatePending(ep) {
				state, ok = Active, true
			}
			if !ok {
				continue
			}
			for _, addr := range ep.Addresses {
				b := Backend{Address: addr, Port: target, Weight: DefaultWeight, State: state}
				if state == Draining {
					b.Weight = 0
				}
				// The same endpoint can sit in two slices while they are being
				// rebalanced; the more available reading wins.
				if prev, seen := byID[b.ID()]; !seen || prev.State == Draining {
					byID[b.ID()] = b
				}
			}
		}
	}
	out := make([]Backend, 0, len(byID))
	for _, b := range byID {
		out = append(out, b)
	}
	return out
}

// sliceAddressType is the address type of the Service's primary IP family
// ("" when the Service names none: every IP slice counts).
func sliceAddressType(svc *corev1.Service) discoveryv1.AddressType {
	if len(svc.Spec.IPFamilies) == 0 {
		return ""
	}
	if svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

func endpointState(c discoveryv1.EndpointConditions) (BackendState, bool) {
	ready := c.Ready == nil || *c.Ready
	serving := c.Serving == nil && ready || c.Serving != nil && *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready && !terminating:
		return Active, true
	case serving && terminating:
		return Draining, true
	}
	return "", false
}
