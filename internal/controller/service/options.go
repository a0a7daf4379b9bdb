package service

import (
	"context"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// SyncMode chooses how a reconcile writes.
type SyncMode string

const (
	// SyncIncremental writes only the difference between desired and observed.
	SyncIncremental SyncMode = "incremental"
	// SyncFull rewrites every listener and backend on every sync, the way the
	// upstream service controller does; it exists for side-by-side comparison.
	SyncFull SyncMode = "full"
)

// Options configure the controller. Zero values get sane defaults.
type Options struct {
	Provider provider.Provider
	// LoadBalancerClass selects the Services to manage (default
	// zerodrop.dev/<provider name>).
	LoadBalancerClass string
	// AdoptClassless also manages LoadBalancer Services without a class.
	AdoptClassless bool
	Sync           SyncMode
	// Workers reconcile different load balancers in parallel (default 4).
	Workers int
	// AddressPool, when valid, is where frontend addresses are allocated
	// (providers that assign their own addresses leave it zero).
	AddressPool netip.Prefix
	// StatusPool is set from AddressPool in RoleDataPlane: a replica binds a
	// Service's status address only when it is in this pool.
	StatusPool netip.Prefix
	// BackendAddressMap rewrites backend addresses (lab: published pod
	// addresses → loopback).
	BackendAddressMap []model.AddressMapping
	// KubeProxyHealthzPort is probed by node-mode Cluster listeners (see
	// model.DesiredOptions); 0 probes the nodePort over TCP.
	KubeProxyHealthzPort int32
	// Limits cap ports per Service and health checks per second (zero
	// fields: no cap; the command passes its flags' defaults).
	Limits model.Limits
	// KeyFunc maps a Service to its load balancer (default namespace/name).
	KeyFunc func(*corev1.Service) string
	// ValidateService, when set, checks what the provider itself reads from
	// a Service (the Azure provider: its load balancer annotation). An error
	// makes the Service invalid like a bad zerodrop annotation: a Warning
	// Event, ConfigValid=False, and its listeners stay as they are
	// (invariant 7).
	ValidateService func(*corev1.Service) error
	// ResyncPeriod reconciles every load balancer again (default 10 min).
	ResyncPeriod time.Duration
	// ReadQPS and ReadBurst bound the provider reads (default 50, 100:
	// the command passes its per-provider --<provider>-read-qps and
	// --<provider>-read-burst instead).
	ReadQPS   float64
	ReadBurst int
	// ImmediateRemoval removes backends at once instead of draining them
	// first (upstream-like; for side-by-side comparison only).
	ImmediateRemoval bool
	// CoalesceWindow gathers endpoint changes of one load balancer into one
	// write (default 250ms; negative: every change is reconciled at once).
	CoalesceWindow time.Duration
	// DrainPollInterval is how often a draining load balancer is checked
	// again (default 1s). RoleControl: a deleted Service whose listeners
	// remain on a replica that answers is looked at again after it too; a
	// Service that waits for the replicas to serve it is looked at first
	// after it, then as long after a look as it has waited, up to
	// MaxReplicaWait (replicaWaits).
	DrainPollInterval time.Duration
	// MaxReplicaWait (RoleControl) is the longest a load balancer waiting
	// for the data-plane replicas goes without a look (default 10 ×
	// DrainPollInterval): a Service a replica has just served turns Ready
	// within it when no replica pod changed.
	MaxReplicaWait time.Duration
	// ReplicaNamespace and ReplicaSelector (RoleControl) are the
	// data-plane replicas' pods, as Replicas finds them: any change of one
	// looks again at once at the load balancers waiting for the replicas
	// (not at every one). Unset: they are looked at within MaxReplicaWait.
	ReplicaNamespace string
	ReplicaSelector  labels.Selector
	// FailureEventThreshold is how many consecutive failures of one load
	// balancer make a Warning Event (default 5): transient conflicts stay silent.
	FailureEventThreshold int
	// Role chooses which writes this process makes (default RoleAll).
	Role Role
	// Replicas lists the data-plane replicas that count (RoleControl, where
	// it is required): the leader reads each one's load balancer, to set
	// Ready and to let a deleted Service's finalizer go.
	Replicas func(ctx context.Context) ([]lbtarget.Replica, error)
	// ReplicaReadTimeout bounds each read of a data-plane replica
	// (RoleControl; default 5s). The replicas are read at once, and a
	// replica whose last read failed is not waited for (it counts as not
	// answering) while one read of it at a time finds when it answers.
	ReplicaReadTimeout time.Duration
	Metrics            *metrics.Metrics
	Recorder           events.EventRecorder
	Logger             logr.Logger
}
