// Package provider is the boundary between zerodrop's controllers and a load
// balancer implementation (HAProxy, Azure, …). Provider packages implement
// Provider and never import controllers.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// Provider drives one kind of load balancer.
//
// The controller calls a Provider only from the single work item that owns a
// load balancer key (invariant 2), so implementations need not serialise
// writes to one load balancer themselves; they must be safe for concurrent
// calls on different keys.
type Provider interface {
	// Name is the provider's name in metrics and logs ("haproxy", "azure").
	Name() string
	// Unsupported lists the protocols the provider cannot balance.
	Unsupported() map[model.Protocol]bool
	// Observe reads the load balancer as it really is at the provider, with its
	// version. It returns (nil, nil) when the load balancer does not exist.
	Observe(ctx context.Context, key string) (*model.LoadBalancer, error)
	// Apply executes plan. It returns ErrConflict (wrapped) without writing
	// when the load balancer's version is no longer plan.Version.
	Apply(ctx context.Context, plan model.Plan) error
	// Delete removes the load balancer; it returns nil when it is already gone.
	Delete(ctx context.Context, key string) error
	// Backends reports per-backend runtime status (health, connections) of a
	// load balancer, for the pod gates and draining.
	Backends(ctx context.Context, key string) ([]BackendStatus, error)
}

// BackendStatus is what the provider reports of one backend at run time.
type BackendStatus struct {
	Listener string
	Address  string
	Port     int32
	State    model.BackendState
	// Healthy is the provider's health verdict; HealthKnown is false when the
	// provider does not check health.
	Healthy     bool
	HealthKnown bool
	// Probed: the health answer listed this address (an address added
	// after it is not healthy, but not known down either); ProbedAt is when
	// the read that answered began, so a verdict is never taken for newer
	// than it is. Providers without such a read leave both zero.
	Probed   bool
	ProbedAt time.Time
	// Lags: the health is a read whose answer may describe the data plane
	// some time before the read began (Azure's rule health lags its
	// probes), so a Down read after a change may still be the state from
	// before the backend ever came up; DownIsNews says when to believe it.
	// Providers whose verdict is their own current check (HAProxy) leave
	// it false.
	Lags bool
	// UpAt is when the last read that had this address Up began (zero: no
	// read had it Up since it was last in the pool).
	UpAt time.Time
	// Connections is the number of current connections, -1 when unknown.
	Connections int64
}

// Settler is implemented by providers whose data plane takes a removal on
// some time after the provider has reported it applied (a cloud load
// balancer programs its hosts asynchronously). The termination gate waits
// RemovalSettle more once a pod's backend is gone from listener of the load
// balancer key, before it lets the pod stop (invariant 6).
type Settler interface {
	RemovalSettle(key, listener string) time.Duration
}

// ProbeDecider is implemented by providers whose writes are slower than
// their health probe's fall count (Azure: an ARM write takes seconds, the
// probe takes a node out within a few intervals). For such a provider a
// node-mode listener of an externalTrafficPolicy Local Service keeps every
// node that model.NodeExcluded leaves in, active, whatever its local endpoints
// (model.DesiredOptions.ProbeDecidesLocal): kube-proxy's healthCheckNodePort
// answers 503 on a node without a ready local endpoint, and the probe takes
// it out, as cloud-provider-azure relies on (its nodeIP and NIC pools hold
// the nodes whatever their endpoints). A rollout that moves a pod to
// another node then writes nothing; marking the node draining would cost
// the rollout a write's latency where the probe needs none. A provider
// whose writes are faster than its probe (HAProxy's runtime API) does not
// implement it: a node without a local endpoint is drained at once.
type ProbeDecider interface {
	// ProbeDecidesLocal reports that the probe, not a write, takes a
	// Local Service's node without a ready local endpoint out.
	ProbeDecidesLocal() bool
}

// ProbeDecidesLocal reports whether p is a ProbeDecider that says so.
func ProbeDecidesLocal(p Provider) bool {
	d, ok := p.(ProbeDecider)
	return ok && d.ProbeDecidesLocal()
}

// BackendModeDefaulter is implemented by providers whose default backend
// mode, for a Service whose zerodrop.dev/backend-mode names none, is not
// IP mode (Azure: node mode, which works with every network plugin, where
// IP mode needs pod addresses in the virtual network). The controller and
// the gates parse every Service with it (model.ParseServiceConfig) and
// settle it against the load balancer (model.ServiceConfig.Settle): a
// Service it already serves in IP mode stays there.
type BackendModeDefaulter interface {
	DefaultBackendMode() model.BackendMode
}

// DefaultBackendMode is p's default backend mode: IP mode unless p is a
// BackendModeDefaulter that says otherwise.
func DefaultBackendMode(p Provider) model.BackendMode {
	if d, ok := p.(BackendModeDefaulter); ok {
		if m := d.DefaultBackendMode(); m != "" {
			return m
		}
	}
	return model.IPMode
}

// Lister is implemented by providers that can list every load balancer they
// hold for zerodrop (and only those: names zerodrop gave them). The
// controller uses it, once its caches have synced and on every resync, to
// sweep load balancers no Service wants any more (a Service deleted while its
// finalizer was removed by force) and to keep their frontend addresses from
// being allocated again.
type Lister interface {
	List(ctx context.Context) (map[string]*model.LoadBalancer, error)
}

// Validator is implemented by providers that cannot represent every
// desired state (Azure: one backend port per rule, 50 tags per load
// balancer). The controller asks before it plans; a Service named in the
// answer is handled like one with a bad annotation (a Warning Event,
// ConfigValid=False, its listeners stay as observed: invariant 7), and the
// other Services on the load balancer are planned and applied as usual.
type Validator interface {
	// Invalid maps each Service (namespace/name) with listeners in desired
	// that the provider cannot represent to the reason; nil when all fit.
	Invalid(key string, desired *model.LoadBalancer) map[string]error
}

// Grouper is implemented by providers that join concurrent writes into one
// (HAProxy's group reload and mirror: one costs the same for one listener as
// for a thousand, and carries every call waiting for it). How many calls can
// join is how many run at once, so the controller reconciles with up to
// GroupWidth workers instead of its usual few: a data-plane replica that
// starts from nothing builds every load balancer in a few reloads, and
// endpoint churn on thousands of load balancers shares its mirrors.
type Grouper interface {
	GroupWidth() int
}

// ErrConflict means the load balancer changed between Observe and Apply:
// re-read, re-plan and retry.
var ErrConflict = errors.New("load balancer changed since it was observed")

// ErrRefused means the load balancer refused the desired state itself
// (HAProxy's configuration check failing on this load balancer's listeners,
// a port another process holds), while what it served before goes on: the
// same input fails the same way until it or its cause changes. The
// controller tries it again when its Service changes, or after at least
// 10 s (a try may be a reload of every load balancer), and a data-plane
// replica's readiness does not wait for it: one tenant's refused Service
// must not hold a replica out of service for every other.
var ErrRefused = errors.New("refused by the load balancer")

// RetryAfterError asks the caller to retry no sooner than After (throttling).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.After, e.Err)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// Hooks let the caller count what a provider does, without the provider
// importing the metrics of any controller. Nil hooks are skipped.
type Hooks struct {
	// Write is called once per write the provider makes to the load balancer,
	// with a short name of the operation ("add-server", "reload", "put-lb", …).
	Write func(op string)
	// Read is called once per read.
	Read func(op string)
}

// OnWrite calls the Write hook if set.
func (h Hooks) OnWrite(op string) {
	if h.Write != nil {
		h.Write(op)
	}
}

// OnRead calls the Read hook if set.
func (h Hooks) OnRead(op string) {
	if h.Read != nil {
		h.Read(op)
	}
}

// DownIsNews reports a backend its health check has Down, as news since
// the moment since: a provider whose health lags (Lags) must have had it Up
// in a read begun after since, and Down in a later read (also begun after
// since, then). Without that Up the Down may describe the backend before it
// first came up, however recent the read. A provider's own current verdict
// is news as it is.
func DownIsNews(s BackendStatus, since time.Time) bool {
	if !s.HealthKnown || s.Healthy {
		return false
	}
	if !s.Lags {
		return true
	}
	return s.Probed && s.ProbedAt.After(since) && s.UpAt.After(since)
}
