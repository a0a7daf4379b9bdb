package lbtarget

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Gate-only Services (model.AnnotationGateOnly): another controller — the
// cloud's own — writes their load balancer, which Finder.GateOnly reads and
// nothing in zerodrop writes. Their rules are found by the Service's
// frontend (status.loadBalancer.ingress, the Service port) and their
// backends are node addresses (cloud-provider-azure's nodeIP pools), so a
// pod's target is its node, as in node mode. What each gate makes of it:
// podgate.verdict and drain's noNewConnections; docs/azure.md, "Gate-only
// Services".

// gateOnly reports whether svc is a gate-only Service whose gates this
// finder serves.
func (f *Finder) gateOnly(svc *corev1.Service) bool {
	return f.GateOnly != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && model.GateOnly(svc.Annotations) &&
		!f.Services.Managed(svc)
}

// splitGateOnly returns the Services zerodrop writes, and the targets of
// the gate-only ones.
func (f *Finder) splitGateOnly(ctx context.Context, pod *corev1.Pod, svcs []*corev1.Service) ([]*corev1.Service, []Target, error) {
	var own []*corev1.Service
	var out []Target
	for _, svc := range svcs {
		if !f.gateOnly(svc) {
			own = append(own, svc)
			continue
		}
		ts, err := f.gateOnlyTargets(ctx, pod, svc)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, ts...)
	}
	return own, out, nil
}

// gateOnlyTargets is one target per port and ingress address of svc: the
// rule serving it, and what it reports of the pod's node. A port without
// an ingress address yet, or without a rule, is a target not registered:
// nothing sends to the pod through it yet.
func (f *Finder) gateOnlyTargets(ctx context.Context, pod *corev1.Pod, svc *corev1.Service) ([]Target, error) {
	var node corev1.Node
	if err := f.Reader.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
		return nil, fmt.Errorf("get node %s of pod %s/%s: %w", pod.Spec.NodeName, pod.Namespace, pod.Name, err)
	}
	addrs := map[string]bool{model.CanonicalIP(model.MapAddress(f.AddressMap, model.NodeAddress(&node))): true}
	lv, err := f.localView(ctx, svc, pod)
	if err != nil {
		return nil, err
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	base := Target{Service: svc.Namespace + "/" + svc.Name, GateOnly: true, Node: true, NodeOnly: local,
		// The node's probe (kube-proxy's health-check node port) counts
		// ready local endpoints: without a ready sibling it fails once
		// this pod stops being ready, and the node is this pod's own.
		LastLocal: local && !lv.readySibling, ReadySibling: lv.readySibling,
		ChangePublished: lv.published, Connections: -1}
	// An address, or (a ForeignHostReader's: AWS) a hostname; a hostname
	// is skipped by a reader that looks rules up by address only.
	hosts, _ := f.GateOnly.(provider.ForeignHostReader)
	var ingress []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			ingress = append(ingress, in.IP)
		case in.Hostname != "" && hosts != nil:
			ingress = append(ingress, in.Hostname)
		}
	}
	var out []Target
	for _, port := range svc.Spec.Ports {
		proto := port.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if len(ingress) == 0 {
			t := base
			t.Listener = model.ListenerName(svc.Namespace, svc.Name, proto, port.Port) + " (no ingress address yet)"
			out = append(out, t)
		}
		for _, in := range ingress {
			r, err := f.foreignRule(ctx, svc, in, port.Port, model.Protocol(proto))
			if err != nil {
				return nil, fmt.Errorf("gate-only Service %s/%s: %w", svc.Namespace, svc.Name, err)
			}
			t := base
			if r == nil {
				t.Listener = fmt.Sprintf("%s:%d/%s (no rule found)", in, port.Port, proto)
				out = append(out, t)
				continue
			}
			t.LB, t.Listener, t.Settle = r.LB, r.LB+"/"+r.Rule, r.Settle
			t.collect(addrs, r.Backends, DeletionStart(pod))
			t.ProbedDown = probedDown(DeletionStart(pod), addrs, r.Backends, "")
			out = append(out, t)
		}
	}
	return out, nil
}

// foreignRule reads the rule serving port over proto at ingress in (an
// address, or a hostname for a ForeignHostReader). A rule whose backends
// are instances (ForeignRule.ByInstance) gets its nodes' addresses in their
// place, from the Nodes' spec.providerID; an instance no Node names is left
// out (it is no node of this cluster: no kube-proxy to wait for, no pod).
func (f *Finder) foreignRule(ctx context.Context, svc *corev1.Service, in string, port int32, proto model.Protocol) (*provider.ForeignRule, error) {
	var (
		r   *provider.ForeignRule
		err error
	)
	if net.ParseIP(in) == nil {
		hosts := f.GateOnly.(provider.ForeignHostReader) // gateOnlyTargets kept hostnames only for one
		r, err = hosts.ForeignRuleByHost(ctx, provider.ForeignService{Namespace: svc.Namespace, Name: svc.Name,
			UID: string(svc.UID), Hostname: in}, port, proto)
	} else {
		r, err = f.GateOnly.ForeignRule(ctx, in, port, proto)
	}
	if err != nil || r == nil || !r.ByInstance {
		return r, err
	}
	var nodes corev1.NodeList
	if err := f.Reader.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes for the instances of %s/%s: %w", r.LB, r.Rule, err)
	}
	byID := map[string]string{}
	for i := range nodes.Items {
		if id := InstanceID(nodes.Items[i].Spec.ProviderID); id != "" {
			byID[id] = model.CanonicalIP(model.MapAddress(f.AddressMap, model.NodeAddress(&nodes.Items[i])))
		}
	}
	out := *r
	out.Backends = make([]provider.BackendStatus, 0, len(r.Backends))
	for _, b := range r.Backends {
		if addr := byID[b.Address]; addr != "" {
			b.Address = addr
			out.Backends = append(out.Backends, b)
		}
	}
	return &out, nil
}

// InstanceID is the cloud's ID of a node from its spec.providerID: the
// last path segment (aws:///us-east-1a/i-0123… → i-0123…); "" for none.
func InstanceID(providerID string) string {
	if providerID == "" {
		return ""
	}
	return providerID[strings.LastIndex(providerID, "/")+1:]
}

// probedDown: the pod is terminating (started, its deletion's start, is
// not zero), and health has every one of its node's addresses on listener
// ("": any) Down as news since then (provider.DownIsNews): with rule
// health, Up in a read begun after then, and Down in a later one. A Down
// alone, even from a read begun after the deletion, may describe the node
// before it first came up.
func probedDown(started time.Time, addrs map[string]bool, statuses []provider.BackendStatus, listener string) bool {
	if started.IsZero() {
		return false
	}
	found := false
	for _, s := range statuses {
		if !addrs[model.CanonicalIP(s.Address)] || listener != "" && s.Listener != listener {
			continue
		}
		if !provider.DownIsNews(s, started) {
			return false
		}
		found = true
	}
	return found
}
