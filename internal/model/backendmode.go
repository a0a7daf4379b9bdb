package model

import (
	corev1 "k8s.io/api/core/v1"
)

// A Service without AnnotationBackendMode gets its provider's default
// backend mode (provider.DefaultBackendMode: IP mode on HAProxy, node mode
// on Azure, where node mode works with every network plugin and writes
// nothing when a Local Service's pod moves node). Settle keeps such a
// Service in IP mode where node mode would be wrong: where it cannot serve
// the Service, and where the load balancer already serves it in IP mode —
// an earlier version's default, or an annotation since removed. Moving
// that Service would rewrite its pool, pods to nodes, under live
// connections (on Azure the annotation `node` cannot move it either while
// it has endpoints: the step between needs two backend ports on one rule,
// and the Service is refused as Unrepresentable).

// Why Settle keeps a Service in IP mode (ServiceConfig.ModeKept).
const (
	KeptNoNodePort = "a port has no nodePort (allocateLoadBalancerNodePorts: false), which node mode needs"
	KeptServed     = "the load balancer already serves it in IP mode, and moving it would rewrite its pool under live connections"
)

// Served is what a load balancer holds for a Service, as Settle reads it.
type Served struct {
	// Backends lists what the load balancer holds for one listener.
	Backends func(listener string) []Backend
	// Node reports whether an address (as the load balancer holds it:
	// mapped, canonical) is a node's.
	Node func(address string) bool
}

// Settle is cfg with the backend mode settled for svc: unchanged when the
// annotation names the mode or the default is IP mode; IP mode, with
// ModeKept saying why, when a port of svc has no nodePort or when the
// load balancer serves svc in IP mode now (ServedInIPMode; served nil:
// not read). IP mode is never settled back to the default, so every
// reader that sees the same load balancer agrees (the controller that
// writes it, the gates that read it).
func (cfg ServiceConfig) Settle(svc *corev1.Service, served *Served) ServiceConfig {
	if !cfg.ModeDefault || cfg.Mode == IPMode {
		return cfg
	}
	switch {
	case !hasNodePorts(svc):
		cfg.Mode, cfg.ModeKept = IPMode, KeptNoNodePort
	case served != nil && ServedInIPMode(svc, *served):
		cfg.Mode, cfg.ModeKept = IPMode, KeptServed
	}
	return cfg
}

// hasNodePorts reports whether every port of svc has a nodePort.
func hasNodePorts(svc *corev1.Service) bool {
	for _, p := range svc.Spec.Ports {
		if p.NodePort == 0 {
			return false
		}
	}
	return true
}

// ServedInIPMode reports whether a load balancer serves svc in IP mode:
// one of svc's listeners has a backend that node mode never writes — off
// the port's nodePort and at no node's address. Node mode writes nodes
// at the nodePort (an edited nodePort leaves nodes at the old one for a
// while, still node mode); IP mode writes endpoints at their target
// port. A pod on the host network listening off the nodePort reads as
// node mode: its Service's annotation must say ip. A listener without
// backends says nothing: a pool emptied of pods holds no connection to
// move.
func ServedInIPMode(svc *corev1.Service, served Served) bool {
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		for _, b := range served.Backends(ListenerName(svc.Namespace, svc.Name, proto, p.Port)) {
			if b.Port != p.NodePort && !served.Node(CanonicalIP(b.Address)) {
				return true
			}
		}
	}
	return false
}

// ObservedBackends lists a listener's backends in lb as observed (nil
// holds none).
func ObservedBackends(lb *LoadBalancer) func(listener string) []Backend {
	return func(listener string) []Backend {
		if l := lb.Listener(listener); l != nil {
			return l.Backends
		}
		return nil
	}
}

// NodeAddresses are the nodes' addresses as a load balancer holds them
// (mapped as Desired maps them, canonical), for Served.Node.
func NodeAddresses(nodes []*corev1.Node, mappings []AddressMapping) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		if ip := NodeAddress(n); ip != "" {
			out[CanonicalIP(MapAddress(mappings, ip))] = true
		}
	}
	return out
}

// ModeNote is what the Service's condition says of a backend mode that no
// annotation named, where that is news: the provider's default when it is
// not IP mode, or IP mode kept (ModeKept). "" otherwise (an annotated
// mode, or IP mode as the default, as before the default could differ).
func (cfg ServiceConfig) ModeNote() string {
	switch {
	case !cfg.ModeDefault:
		return ""
	case cfg.ModeKept != "":
		return "backend mode ip, not the provider's default: " + cfg.ModeKept
	case cfg.Mode != IPMode:
		return "backend mode " + string(cfg.Mode) + ", the provider's default (zerodrop.dev/backend-mode: ip asks for IP mode)"
	}
	return ""
}
