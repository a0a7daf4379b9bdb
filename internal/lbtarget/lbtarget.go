// Package lbtarget answers, for one pod, "which load balancers select it and
// what do they report of it?" — the question behind both pod gates: the
// readiness gate (is it served?) and the termination gate (is it drained?).
package lbtarget

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Services says which Services are zerodrop's and which load balancer each
// maps to (the Service controller implements it).
type Services interface {
	Managed(*corev1.Service) bool
	Key(*corev1.Service) string
}

// Finder looks pods up in the load balancers that select them.
type Finder struct {
	// Reader is the manager's cache in the command: its Pods are trimmed
	// to what zerodrop reads (internal/podcache lists this package's).
	Reader   client.Reader
	Services Services
	// Provider is the load balancer the pods' backends are read from; with
	// Replicas, it only says which protocols are unsupported.
	Provider   provider.Provider
	AddressMap []model.AddressMapping
	// Replicas, when set, lists the data-plane replicas that count now: one
	// load balancer each, all programmed alike (internal/dataplane). Every
	// one is read, and each gives its own targets, so a pod is served only
	// when every replica serves it and drained only when every replica has
	// it drained. No replica at all is an error: nothing can say the pod is
	// served.
	Replicas func(ctx context.Context) ([]Replica, error)
	// GateOnly, when set, reads the load balancers of gate-only Services
	// (model.AnnotationGateOnly), which another controller writes: their
	// pods are gated from it (gateonly.go). Nil: gate-only is off, and
	// those Services select nothing.
	GateOnly provider.ForeignReader
}

// Replica is one data-plane replica: its name, for messages, and a view of
// its load balancer (Backends is what is read).
type Replica struct {
	Name     string
	Provider provider.Provider
	// Terminating: the replica's pod is being deleted. Its HAProxy takes
	// no new connection from then on — the chart's preStop stops it softly
	// (its listeners close at once), or the kubelet's SIGTERM stops it —
	// while it keeps the connections it holds until they end or its bound.
	Terminating bool
}

// views are the load balancers to read: the replicas, or Provider.
func (f *Finder) views(ctx context.Context) ([]Replica, error) {
	if f.Replicas == nil {
		return []Replica{{Provider: f.Provider}}, nil
	}
	rs, err := f.Replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("data-plane replicas: %w", err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("no data-plane replica counts: none can serve or drain the pod yet")
	}
	return rs, nil
}

// askedAbout are the replicas to read about pod. A pod not being deleted
// is the readiness gate's: the question is whether new connections reach
// it, and a terminating replica takes none (Replica.Terminating), so it is
// not asked — during a data-plane update the old pod drains its
// connections for up to its grace period, and a rollout's new pods would
// wait for it all that time. It holds connections, so it is asked about a
// pod being deleted (the termination gate: drained on every replica). A
// pod not being deleted with every replica terminating has none to serve
// it: an error, and the gate waits.
func askedAbout(views []Replica, pod *corev1.Pod) ([]Replica, error) {
	if pod.DeletionTimestamp != nil {
		return views, nil
	}
	out := make([]Replica, 0, len(views))
	for _, v := range views {
		if !v.Terminating {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("every data-plane replica is terminating (%d): none takes new connections to serve the pod", len(views))
	}
	return out, nil
}

// unsupported reports the protocols the load balancers cannot balance.
func (f *Finder) unsupported(proto corev1.Protocol) bool {
	return f.Provider != nil && f.Provider.Unsupported()[model.Protocol(proto)]
}

// Target is one listener of one load balancer that should serve a pod, and
// what the provider reports of the pod there.
type Target struct {
	Service  string
	LB       string
	Listener string
	// Replica names the data-plane replica the target was read from ("" for
	// a single load balancer).
	Replica string
	// Registered: the provider has a backend for the pod on this listener.
	Registered bool
	// Healthy: registered and healthy, or the provider does not check health.
	Healthy bool
	// Node: the backend is the pod's node (node mode), shared with the
	// node's other pods.
	Node bool
	// NodeOnly: node mode with externalTrafficPolicy Local — the backend is
	// the node, whose health follows the pod's readiness (waiting for it would
	// be a cycle, invariant 5).
	NodeOnly bool
	// LastLocal: NodeOnly, and the pod is its node's last endpoint of the
	// Service that is not terminating, so the node leaves the rotation: the
	// controller drains its backend (model.Desired), or, where the provider
	// leaves a Local node to its probe (provider.ProbeDecider: Azure), the
	// health check fails once kube-proxy has no ready local endpoint, which
	// ProbedDown reads. Otherwise a node-mode pod is reached through
	// kube-proxy on the nodes in Sending.
	LastLocal bool
	// Sending lists, for a node-mode target that is not LastLocal, the nodes
	// whose kube-proxy may still send the load balancer's new connections to
	// the pod: for Local the pod's own node, for Cluster every node of the
	// listener; only those the load balancer still sends to (active, and not
	// reported down by its health check).
	Sending []string
	// ChangePublished: node mode, and the Service's EndpointSlices (this
	// replica's cache of them) show the pod's endpoint terminating or no
	// more — what kube-proxy acts on.
	ChangePublished bool
	// Connections of the pod's backend, -1 when unknown or not registered.
	Connections int64
	State       model.BackendState
	// GateOnly: another controller writes this load balancer (a gate-only
	// Service); the backend is the pod's node (gateonly.go).
	GateOnly bool
	// ReadySibling: another endpoint of the Service on the pod's node is
	// ready (gate-only: the node's probe is Up without this pod).
	ReadySibling bool
	// ProbedDown: gate-only or LastLocal, the pod terminating, and the
	// health read after its deletion began has the node's probe Down as news
	// (probedDown): the load balancer's own state, that it sends the node
	// nothing new, whatever its pool says.
	ProbedDown bool
	// Settle is how long the data plane may take to act on the node's
	// removal from a gate-only rule's pool (two probe intervals).
	Settle time.Duration
}

// Selecting lists the zerodrop Services whose selector matches the pod.
func (f *Finder) Selecting(ctx context.Context, pod *corev1.Pod) ([]*corev1.Service, error) {
	var list corev1.ServiceList
	if err := f.Reader.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return nil, fmt.Errorf("list services in %s: %w", pod.Namespace, err)
	}
	var out []*corev1.Service
	for i := range list.Items {
		svc := &list.Items[i]
		if !(f.Services.Managed(svc) || f.gateOnly(svc)) || svc.DeletionTimestamp != nil || len(svc.Spec.Selector) == 0 {
			continue
		}
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			out = append(out, svc)
		}
	}
	return out, nil
}

// Targets reports the pod's backends in every load balancer that selects it.
// The load balancers are read at the same time (each replica's, each
// Service's): a replica that does not answer costs the call one read's
// bound (the replica's client timeout, or ctx), not one per read.
func (f *Finder) Targets(ctx context.Context, pod *corev1.Pod) ([]Target, error) {
	svcs, err := f.Selecting(ctx, pod)
	if err != nil {
		return nil, err
	}
	var out []Target
	svcs, out, err = f.splitGateOnly(ctx, pod, svcs)
	if err != nil || len(svcs) == 0 {
		return out, err
	}
	views, err := f.views(ctx)
	if err != nil {
		return nil, err
	}
	if views, err = askedAbout(views, pod); err != nil {
		return nil, err
	}
	// One read per load balancer and replica, all at once; then what each
	// Service asks of the pod, from the caches and, for a backend mode no
	// annotation names, from what its load balancer holds (settle).
	// Each load balancer is read once for every Service on it that selects
	// the pod, naming their listeners as the ones whose health is wanted
	// (a provider with a health budget spends it on them).
	type read struct {
		statuses []provider.BackendStatus
		err      error
	}
	keys := make([]string, len(svcs))
	wanted := map[string][]string{}
	for i, svc := range svcs {
		keys[i] = f.Services.Key(svc)
		wanted[keys[i]] = append(wanted[keys[i]], f.listeners(svc)...)
	}
	reads := map[string]*read{}
	var wg sync.WaitGroup
	for _, key := range keys {
		for _, view := range views {
			cacheKey := view.Name + "\x00" + key
			if reads[cacheKey] != nil {
				continue
			}
			rd := &read{}
			reads[cacheKey] = rd
			wctx := provider.WithWantedListeners(ctx, wanted[key])
			wg.Go(func() { rd.statuses, rd.err = view.Provider.Backends(wctx, key) })
		}
	}
	wg.Wait()
	for _, key := range keys {
		for _, view := range views {
			if rd := reads[view.Name+"\x00"+key]; rd.err != nil {
				if view.Name != "" {
					return nil, fmt.Errorf("backend status of %s on data-plane replica %s: %w", key, view.Name, rd.err)
				}
				return nil, fmt.Errorf("backend status of %s: %w", key, rd.err)
			}
		}
	}
	modes := settler{f: f}
	for i, svc := range svcs {
		// An invalid Service keeps its listeners but its backends follow its
		// endpoints in the mode its valid annotations give (invariant 7):
		// judge the pod by that config, the default in place of a bad value.
		mode, err := modes.mode(ctx, svc, reads[views[0].Name+"\x00"+keys[i]].statuses)
		if err != nil {
			return nil, err
		}
		addrs := f.podAddresses(pod)
		nodeOnly, lastLocal, published := false, false, false
		if mode == model.NodeMode {
			var node corev1.Node
			if err := f.Reader.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
				return nil, fmt.Errorf("get node %s of pod %s/%s: %w", pod.Spec.NodeName, pod.Namespace, pod.Name, err)
			}
			addrs = map[string]bool{model.CanonicalIP(model.MapAddress(f.AddressMap, model.NodeAddress(&node))): true}
			nodeOnly = svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
			lv, err := f.localView(ctx, svc, pod)
			if err != nil {
				return nil, err
			}
			published, lastLocal = lv.published, nodeOnly && lv.last
		}
		base := Target{Service: svc.Namespace + "/" + svc.Name, LB: keys[i],
			Node: mode == model.NodeMode, NodeOnly: nodeOnly, LastLocal: lastLocal,
			ChangePublished: published, Connections: -1}
		for _, view := range views {
			base.Replica = view.Name
			out = append(out, f.portTargets(svc, base, addrs, reads[view.Name+"\x00"+keys[i]].statuses, DeletionStart(pod))...)
		}
	}
	return out, nil
}

// listeners are the names of svc's listeners the load balancers balance.
func (f *Finder) listeners(svc *corev1.Service) []string {
	var out []string
	for _, port := range svc.Spec.Ports {
		proto := port.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if !f.unsupported(proto) {
			out = append(out, model.ListenerName(svc.Namespace, svc.Name, proto, port.Port))
		}
	}
	return out
}

// portTargets is one target per port of svc that the load balancers
// balance, each base with its listener and what statuses (one load
// balancer's) report of the pod's addresses there.
func (f *Finder) portTargets(svc *corev1.Service, base Target, addrs map[string]bool, statuses []provider.BackendStatus, since time.Time) []Target {
	var out []Target
	for _, l := range f.listeners(svc) {
		t := base
		t.Listener = l
		t.collect(addrs, statuses, since)
		if t.LastLocal {
			// The node's probe (kube-proxy's health-check node port) fails
			// once this pod stops being ready: read as news, it says the
			// load balancer stopped before the node's drain is written,
			// which may wait (model.StepOptions.Up) or take a write's time.
			t.ProbedDown = probedDown(since, addrs, statuses, l)
		}
		out = append(out, t)
	}
	return out
}

// collect counts what statuses report of the target's listener: the pod's
// own backends (addrs), and in node mode the nodes that still send to it —
// every active one but those whose health check has them Down as news
// since the pod's deletion began (since; provider.DownIsNews).
func (t *Target) collect(addrs map[string]bool, statuses []provider.BackendStatus, since time.Time) {
	for _, s := range statuses {
		if s.Listener != t.Listener {
			continue
		}
		mine := addrs[model.CanonicalIP(s.Address)]
		if mine {
			t.add(s)
		}
		sending := s.State == model.Active && !provider.DownIsNews(s, since)
		if t.Node && !t.LastLocal && sending && (mine || !t.NodeOnly) {
			t.Sending = append(t.Sending, s.Address)
		}
	}
}

// localState is what the Service's EndpointSlices say around one pod.
type localState struct {
	// last: no other endpoint of the Service on the pod's node that is not
	// terminating (the pod itself does not count, whatever its slice says
	// yet: the drain call comes as soon as the kubelet sees the deletion,
	// maybe before the slice does).
	last bool
	// readySibling: another endpoint on the pod's node is ready.
	readySibling bool
	// published: the slices show the pod's endpoint terminating or no more.
	published bool
}

// localView reads the Service's EndpointSlices for what localState says.
func (f *Finder) localView(ctx context.Context, svc *corev1.Service, pod *corev1.Pod) (localState, error) {
	var slices discoveryv1.EndpointSliceList
	if err := f.Reader.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return localState{}, fmt.Errorf("list endpoint slices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	out := localState{last: true, published: true}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if isPod(ep, pod) {
				out.published = out.published && terminating
				continue
			}
			if ep.NodeName != nil && *ep.NodeName == pod.Spec.NodeName && !terminating {
				out.last = false
				// A nil Ready is unknown, which the API asks consumers to take as ready.
				out.readySibling = out.readySibling || ep.Conditions.Ready == nil || *ep.Conditions.Ready
			}
		}
	}
	return out, nil
}

// isPod: the endpoint is pod's, by its target (the uid when the slice has
// one: a pod of the same name may be a newer one) or else by address.
func isPod(ep discoveryv1.Endpoint, pod *corev1.Pod) bool {
	if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
		if ep.TargetRef.UID != "" {
			return ep.TargetRef.UID == pod.UID
		}
		return ep.TargetRef.Namespace == pod.Namespace && ep.TargetRef.Name == pod.Name
	}
	for _, a := range ep.Addresses {
		if a == pod.Status.PodIP {
			return true
		}
	}
	return false
}

// podAddresses is every address of the pod as the load balancers know it: a
// dual-stack pod may be registered under any of status.podIPs (a Service of
// the IPv6 family lists only the IPv6 one), not only status.podIP.
func (f *Finder) podAddresses(pod *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	if pod.Status.PodIP != "" {
		out[model.CanonicalIP(model.MapAddress(f.AddressMap, pod.Status.PodIP))] = true
	}
	for _, ip := range pod.Status.PodIPs {
		out[model.CanonicalIP(model.MapAddress(f.AddressMap, ip.IP))] = true
	}
	return out
}

// add counts one backend of the pod on the target's listener. A dual-stack
// pod may have one per address: the pod is served only when all are healthy,
// draining while any drains, and its connections are theirs summed.
func (t *Target) add(s provider.BackendStatus) {
	healthy := !s.HealthKnown || s.Healthy
	if !t.Registered {
		t.Registered, t.Healthy, t.State, t.Connections = true, healthy, s.State, s.Connections
		return
	}
	t.Healthy = t.Healthy && healthy
	// One of the pod's backends still active (a dual-stack pod has one per
	// address) makes the target active: it still takes new connections.
	if s.State == model.Active {
		t.State = model.Active
	}
	if t.Connections < 0 || s.Connections < 0 {
		t.Connections = -1
	} else {
		t.Connections += s.Connections
	}
}

// Describe is a short account of targets for messages.
func Describe(ts []Target) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		state := "not registered"
		switch {
		case t.Registered && t.Healthy:
			state = "serving"
		case t.Registered:
			state = "registered, not healthy yet"
		}
		if t.Registered && t.State == model.Draining {
			state = fmt.Sprintf("draining (%d connections)", t.Connections)
		}
		where := t.Listener
		if t.Replica != "" {
			where += " on " + t.Replica
		}
		parts = append(parts, where+": "+state)
	}
	return strings.Join(parts, "; ")
}

// DeletionStart is when the pod's deletion began (zero: it is not being
// deleted): DeletionTimestamp is when the kubelet kills it, the start plus
// the grace period.
func DeletionStart(pod *corev1.Pod) time.Time {
	if pod.DeletionTimestamp == nil {
		return time.Time{}
	}
	return pod.DeletionTimestamp.Add(-GracePeriod(pod))
}

// GracePeriod is the pod's deletion grace period, the Kubernetes default of
// 30 s when the pod does not say.
func GracePeriod(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}
