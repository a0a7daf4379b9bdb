// Package model is the provider-neutral description of a load balancer: what
// zerodrop wants (built from Services, EndpointSlices and Nodes) and what a
// provider reports. Everything here is pure so that the decision "does this
// reconcile need a write?" can be tested with plain tables and fuzzing.
package model

import "fmt"

// Protocol is an L4 protocol as Kubernetes names it.
type Protocol string

// Protocols zerodrop knows.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// BackendMode says what a backend address points at.
type BackendMode string

const (
	// IPMode sends traffic straight to endpoint IP:targetPort.
	IPMode BackendMode = "ip"
	// NodeMode sends traffic to node IP:nodePort, as cloud load balancers do
	// for instance targets.
	NodeMode BackendMode = "node"
)

// BackendState is the administrative state of one backend.
type BackendState string

const (
	// Active backends receive new connections.
	Active BackendState = "active"
	// Draining backends receive no new connections; established ones continue.
	Draining BackendState = "draining"
)

// LoadBalancer is one load balancer at the provider. Several Services may
// share one (Azure does), so it is keyed by the provider's name for it.
type LoadBalancer struct {
	// Key names the load balancer at the provider.
	Key string `json:"key"`
	// Version is the provider's concurrency token (an ETag) as observed; it is
	// empty in a desired state and not part of comparisons.
	Version string `json:"-"`
	// Listeners are kept sorted by Name (see Canonical).
	Listeners []Listener `json:"listeners,omitempty"`
}

// Listener is one frontend (address, port, protocol) and the pool behind it.
type Listener struct {
	// Name is unique within the load balancer and stable across restarts.
	Name     string   `json:"name"`
	Address  string   `json:"address"`
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
	// Probe is how the load balancer decides a backend is healthy.
	Probe Probe `json:"probe"`
	// Backends are kept sorted by address and port (see Canonical).
	Backends []Backend `json:"backends,omitempty"`
}

// ProbeKind is how a backend is checked.
type ProbeKind string

// Probe kinds.
const (
	ProbeTCP  ProbeKind = "tcp"
	ProbeHTTP ProbeKind = "http"
)

// Probe is a health check as the load balancer runs it.
type Probe struct {
	Kind ProbeKind `json:"kind"`
	// Port overrides the backend port when non-zero (healthCheckNodePort).
	Port int32 `json:"port,omitempty"`
	// Path is the HTTP path for ProbeHTTP.
	Path string `json:"path,omitempty"`
	// IntervalMillis between two checks.
	IntervalMillis int32 `json:"intervalMillis"`
	// Rise consecutive successes make a backend healthy, Fall failures unhealthy.
	Rise int32 `json:"rise"`
	Fall int32 `json:"fall"`
}

// Backend is one server in a listener's pool.
type Backend struct {
	Address string       `json:"address"`
	Port    int32        `json:"port"`
	Weight  int32        `json:"weight"`
	State   BackendState `json:"state"`
}

// ID is the backend's identity within a pool.
func (b Backend) ID() string { return fmt.Sprintf("%s:%d", b.Address, b.Port) }

// Listener returns the listener with the given name, or nil.
func (lb *LoadBalancer) Listener(name string) *Listener {
	if lb == nil {
		return nil
	}
	for i := range lb.Listeners {
		if lb.Listeners[i].Name == name {
			return &lb.Listeners[i]
		}
	}
	return nil
}

// SameFrontend reports whether two listeners differ only in their backends.
func (l Listener) SameFrontend(o Listener) bool {
	return l.Name == o.Name && l.Address == o.Address && l.Port == o.Port &&
		l.Protocol == o.Protocol && l.Probe == o.Probe
}

// DefaultWeight is the weight of an active backend.
const DefaultWeight int32 = 100
