package dataplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/lbtarget"
)

// NodeLeaseNamespace holds the kubelets' heartbeats, one Lease per node.
const NodeLeaseNamespace = "kube-node-lease"

// ReasonReplicaNotCounted is the Event reason when a replica stops counting.
const ReasonReplicaNotCounted = "DataPlaneReplicaNotCounted"

// Discovery lists the data-plane replicas that count: the pods of the data
// plane that can receive traffic. A replica counts while its HAProxy may —
// not merely while its zerodrop process answers: one whose zerodrop process
// died while its HAProxy runs still counts, and the gates wait for it (its
// state endpoint does not answer) until the call's deadline. It stops
// counting when its pod is gone or finished, or when its node's Lease has
// expired: the node is lost, and the traffic through it with it (the
// DaemonSet's pods tolerate unreachable nodes, so the pod alone says
// nothing). A pod without an address yet does not count: nothing reaches
// its HAProxy.
//
// A Lease is judged on this process' clock, never by its renewTime, which
// the node's clock wrote (a node 40 s behind would look lost while it
// carries traffic): as the kube node lifecycle controller does, Discovery
// records, per node, the time on its own clock at which it saw the Lease's
// renewTime change, and the node is lost once a full lease duration has
// passed since then without another change seen. Changes are seen when
// Replicas is called (each gate's read, each reconcile of the control
// role), so a renewal is timed when it is seen, never earlier: a judgement
// may come late, never early. A process that has just started (a restarted
// or new leader, a new replica of the control role) has seen nothing yet:
// the first sight of a Lease starts its observation, whatever its
// renewTime, so a node is judged lost only after a full lease duration
// without a renewal seen by this process. A node already lost when the
// process starts is declared lost one lease duration after its first look,
// not at once: the gates wait for its replica meanwhile, they never answer
// early.
type Discovery struct {
	// Reader is the manager's cache in the command: its Pods are trimmed
	// to what zerodrop reads (internal/podcache lists what is read here).
	Reader    client.Reader
	Namespace string
	Selector  labels.Selector
	// Indexed says Reader is a cache with ReplicaIndex on Pods
	// (IndexReplicas with Selector): the list reads only the pods the
	// index names, not every pod of Namespace — the control role lists
	// the replicas at every reconcile, and the namespace may hold
	// thousands of other pods (at 10,000 Services with 40,000 pods in it,
	// that walk made a restart's verification take minutes).
	Indexed bool
	// Port is the state endpoint's port on each replica's pod address.
	Port int
	// AlternatePorts are where a replica's state endpoint may be instead
	// (Server.AlternateAddr): two pods on one node share its address, and
	// the second binds an alternate. When there are any, each replica's
	// port is the one whose certificate names that replica's pod
	// (statePort), found by a handshake and kept per pod UID until a read
	// through it fails.
	AlternatePorts []int
	// TLS gives the client side of the TLS connection to the replica whose
	// pod has uid: it must accept only that replica's certificate
	// (stateauth.Authority.TLSConfig).
	TLS func(uid string) *tls.Config
	// ReadTimeout bounds each read of a replica (default
	// DefaultReplicaReadTimeout).
	ReadTimeout time.Duration
	// Recorder, when set, gets a Warning Event on a replica's pod when it
	// stops counting for its node's Lease (once per pod).
	Recorder events.EventRecorder
	// Now is the clock (default time.Now): Leases are judged on it.
	Now func() time.Time

	mu       sync.Mutex
	reported map[types.UID]bool
	clients  map[types.UID]replicaClient
	// leases are the node Leases as last seen, by node name.
	leases map[string]leaseSeen
}

// leaseSeen is a node Lease's renewTime as this process last saw it, and
// when (on this process' clock) it first saw that renewTime.
type leaseSeen struct {
	renewTime time.Time
	at        time.Time
}

// DefaultReplicaReadTimeout bounds each read of a replica: one that does not
// answer makes the gates wait, not hang.
const DefaultReplicaReadTimeout = 5 * time.Second

// DefaultReplicaHandshakeTimeout bounds connecting to a replica and the TLS
// handshake (at most half the read timeout): the state endpoint handshakes
// within milliseconds, also under a flood (it evicts the flood's oldest
// connections, never a new one), so a longer wait means the replica is
// unreachable, and the read fails without spending the rest of its bound.
const DefaultReplicaHandshakeTimeout = 2 * time.Second

// replicaClient is how one replica pod is read: its HTTP client, and its
// state port when it may be at one of several (nil: Port).
type replicaClient struct {
	http *http.Client
	port *statePort
}

// ports are the state endpoint's candidate ports, Port first.
func (d *Discovery) ports() []int {
	ports := []int{d.Port}
	for _, p := range d.AlternatePorts {
		if p > 0 && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// clientsFor keeps one HTTP client (and its kept-alive connections) per
// replica pod that counts, and its state port found, and drops the
// others'.
func (d *Discovery) clientsFor(pods []*corev1.Pod) map[types.UID]replicaClient {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := make(map[types.UID]replicaClient, len(pods))
	ports := d.ports()
	for _, p := range pods {
		rc := d.clients[p.UID]
		if rc.port != nil && rc.port.host != p.Status.PodIP {
			rc.port = nil
		}
		c := rc.http
		if c == nil {
			timeout := d.ReadTimeout
			if timeout <= 0 {
				timeout = DefaultReplicaReadTimeout
			}
			// The connection and the handshake get a bound of their own,
			// shorter than the read's: a replica that does not complete
			// them promptly (its node gone, its endpoint overwhelmed)
			// fails this read early with an error saying which step, and
			// the gate's next check dials afresh (a failed connection is
			// never reused). No retry here: the gate's own polling is the
			// retry, and a failure stays visible to it.
			connect := min(timeout/2, DefaultReplicaHandshakeTimeout)
			cfg := d.TLS(string(p.UID))
			c = &http.Client{Timeout: timeout, Transport: &http.Transport{
				TLSClientConfig: cfg, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
				DialContext:         (&net.Dialer{Timeout: connect, KeepAlive: 15 * time.Second}).DialContext,
				TLSHandshakeTimeout: connect, ForceAttemptHTTP2: false}}
			rc = replicaClient{http: c}
		}
		if rc.port == nil && len(ports) > 1 {
			rc.port = &statePort{host: p.Status.PodIP, ports: ports,
				probe: dialTLS(c.Transport.(*http.Transport).TLSClientConfig, c.Transport.(*http.Transport).TLSHandshakeTimeout)}
		}
		next[p.UID] = rc
	}
	for uid, rc := range d.clients {
		if next[uid].http == nil {
			rc.http.CloseIdleConnections()
		}
	}
	d.clients = next
	return next
}

// ReplicaIndex is the field index of Pods IndexReplicas adds: replicaIndexed
// for a pod the data-plane selector matches, nothing for any other.
const (
	ReplicaIndex   = "zerodrop.dev/data-plane-replica"
	replicaIndexed = "yes"
)

// IndexReplicas adds ReplicaIndex for selector to a cache's Pods (before
// the cache starts), for a Discovery with Indexed.
func IndexReplicas(ctx context.Context, indexer client.FieldIndexer, selector labels.Selector) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, ReplicaIndex, func(o client.Object) []string {
		if selector.Matches(labels.Set(o.GetLabels())) {
			return []string{replicaIndexed}
		}
		return nil
	})
}

// Replicas implements lbtarget.Finder.Replicas.
func (d *Discovery) Replicas(ctx context.Context) ([]lbtarget.Replica, error) {
	var pods corev1.PodList
	opts := []client.ListOption{client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: d.Selector}}
	if d.Indexed {
		opts = append(opts, client.MatchingFields{ReplicaIndex: replicaIndexed})
	}
	if err := d.Reader.List(ctx, &pods, opts...); err != nil {
		return nil, fmt.Errorf("list data-plane pods in %s: %w", d.Namespace, err)
	}
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	var counted []*corev1.Pod
	nodes := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		nodes[p.Spec.NodeName] = true
		expired, why, err := d.nodeLost(ctx, p.Spec.NodeName, now)
		if err != nil {
			return nil, err
		}
		if expired {
			d.report(p, why)
			continue
		}
		counted = append(counted, p)
	}
	d.forgetLeases(nodes)
	clients := d.clientsFor(counted)
	out := make([]lbtarget.Replica, 0, len(counted))
	for _, p := range counted {
		rc := clients[p.UID]
		r := &Remote{Replica: p.Name, Client: rc.http, port: rc.port}
		if rc.port == nil {
			r.BaseURL = "https://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(d.Port))
		}
		out = append(out, lbtarget.Replica{Name: p.Name, Provider: r, Terminating: p.DeletionTimestamp != nil})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// nodeLost reports whether node's Lease has expired: no change of its
// renewTime seen for a full lease duration on this process' clock (now,
// read after the Lease). A node without a Lease (or a pod not scheduled yet)
// is not lost: the replica keeps counting, and the gates keep asking it.
func (d *Discovery) nodeLost(ctx context.Context, node string, now func() time.Time) (bool, string, error) {
	if node == "" {
		return false, "", nil
	}
	var lease coordinationv1.Lease
	err := d.Reader.Get(ctx, client.ObjectKey{Namespace: NodeLeaseNamespace, Name: node}, &lease)
	if apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("node lease of %s: %w", node, err)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false, "", nil
	}
	renewed, t := lease.Spec.RenewTime.Time, now()
	d.mu.Lock()
	if d.leases == nil {
		d.leases = map[string]leaseSeen{}
	}
	seen, ok := d.leases[node]
	if !ok || !seen.renewTime.Equal(renewed) {
		// A renewal (any change: a node whose clock stepped back renews
		// with an earlier renewTime), or the first sight of this Lease.
		seen = leaseSeen{renewTime: renewed, at: t}
		d.leases[node] = seen
	}
	d.mu.Unlock()
	duration := time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	if since := t.Sub(seen.at); since > duration {
		return true, fmt.Sprintf("node %s's Lease expired: no renewal seen for %s (lease duration %s; last renewTime %s, on the node's clock): the node is lost, and the traffic through this replica with it",
			node, since.Round(time.Second), duration, renewed.UTC().Format(time.RFC3339)), nil
	}
	return false, "", nil
}

// forgetLeases drops what was seen of the Leases of nodes no replica pod is
// on any more. Should one come back, its observation starts again: later
// judged lost, never earlier.
func (d *Discovery) forgetLeases(nodes map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for node := range d.leases {
		if !nodes[node] {
			delete(d.leases, node)
		}
	}
}

// report records, once per pod, that the replica no longer counts.
func (d *Discovery) report(p *corev1.Pod, why string) {
	d.mu.Lock()
	if d.reported == nil {
		d.reported = map[types.UID]bool{}
	}
	seen := d.reported[p.UID]
	d.reported[p.UID] = true
	d.mu.Unlock()
	if !seen && d.Recorder != nil {
		d.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonReplicaNotCounted, "GateReplicas",
			"the pod gates no longer wait for this data-plane replica: %s", why)
	}
}
