// Package metrics holds zerodrop's Prometheus metrics. They are created per
// controller instance and registered on a given Registerer, so that two
// controllers in one test process count separately; the binary registers them
// on controller-runtime's registry, served on the manager's metrics endpoint.
package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"zerodrop.dev/zerodrop/internal/promtext"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/version"
)

// Metrics are the counters and histograms of one controller.
type Metrics struct {
	ProviderWrites    *prometheus.CounterVec
	ProviderReads     *prometheus.CounterVec
	ProviderConflicts *prometheus.CounterVec
	ProviderErrors    *prometheus.CounterVec
	Reconciles        *prometheus.CounterVec
	ReconcileLatency  *prometheus.HistogramVec
	PlanOps           *prometheus.CounterVec
	DrainCalls        *prometheus.CounterVec
	DrainOutcomes     *prometheus.CounterVec
	DrainWait         *prometheus.HistogramVec
	BuildInfo         *prometheus.GaugeVec
	// GateLatency is how long the readiness gate held pods back.
	GateLatency prometheus.Histogram
	// GateUnserved counts, by namespace, the pods the readiness gate keeps
	// checking because no load balancer serves them yet.
	GateUnserved *prometheus.GaugeVec
	// Backends counts the managed load balancers' backends by state.
	Backends *prometheus.GaugeVec
	// StateCertRenewals and StateCertFailures: a data-plane replica's
	// state endpoint certificate requests, by reason, and failed steps, by
	// stage (stateauth.Replica).
	StateCertRenewals *prometheus.CounterVec
	StateCertFailures *prometheus.CounterVec
	// ServicesOverLimit, HealthCheckStretched and HealthCheckRate are the
	// caps of model.Limits (issue 46, M8): Services refused or kept at
	// their last good listeners for a cap, Services whose check intervals
	// are stretched, and the checks per second this replica runs.
	ServicesOverLimit    *prometheus.GaugeVec
	HealthCheckStretched prometheus.Gauge
	HealthCheckRate      prometheus.Gauge
	// WaitingForReplicas counts the load balancers the control role's
	// leader looks at again, backing off, because they wait for the
	// data-plane replicas.
	WaitingForReplicas prometheus.Gauge
	// TCPMigrateReq is a data-plane replica's node's net.ipv4.tcp_migrate_req,
	// read at start.
	TCPMigrateReq prometheus.Gauge
}

// New creates the metrics and registers them on reg (nil: not registered).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ProviderWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_provider_writes_total",
			Help: "Writes made to load balancers, by provider and operation.",
		}, []string{"provider", "op"}),
		ProviderReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_provider_reads_total",
			Help: "Reads made from load balancers, by provider and operation.",
		}, []string{"provider", "op"}),
		ProviderConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_provider_conflicts_total",
			Help: "Plans refused because the load balancer changed since it was observed (re-planned silently).",
		}, []string{"provider"}),
		ProviderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_provider_errors_total",
			Help: "Provider calls that failed, by provider and call.",
		}, []string{"provider", "call"}),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_reconcile_total",
			Help: "Load balancer reconciles, by result (noop, applied, conflict, error, deleted).",
		}, []string{"result"}),
		ReconcileLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "zerodrop_reconcile_duration_seconds",
			Help:    "Time to reconcile one load balancer, observe and apply included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		PlanOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_plan_ops_total",
			Help: "Operations of applied plans, by kind.",
		}, []string{"op"}),
		DrainCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_drain_calls_total",
			Help: "Termination-gate calls, by answer (drained, timeout, refused, busy, bad, unavailable, gone).",
		}, []string{"answer"}),
		DrainOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_drain_outcome_total",
			Help: "Termination-gate calls by outcome: drained (no load balancer or kube-proxy sends the pod new connections), deadline (the bound passed first), unknown_pod (no terminating pod of that name), error (bad call, busy, the pod unreadable, the caller gone).",
		}, []string{"outcome"}),
		DrainWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "zerodrop_drain_wait_seconds",
			Help:    "How long a termination-gate call waited, from finding its terminating pod to its answer, by outcome (drained, deadline).",
			Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89},
		}, []string{"outcome"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zerodrop_build_info",
			Help: "Always 1; the labels say which build runs.",
		}, []string{"version", "goversion"}),
		GateLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "zerodrop_readiness_gate_seconds",
			Help:    "How long the readiness gate held a pod back: from its containers turning ready (ContainersReady) to the gate set True, once every load balancer serves it.",
			Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89},
		}),
		GateUnserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zerodrop_readiness_gate_unserved_pods",
			Help: "Pods the readiness gate keeps checking because a load balancer selecting them does not serve them yet, by namespace (no series for a namespace with none). Their checks back off to a few seconds, and each namespace with pods waiting gets an equal share of the gate's reads: a namespace with many waits longer for each, the others do not.",
		}, []string{"namespace"}),
		Backends: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zerodrop_backends",
			Help: "Backends of the load balancers this replica last reconciled as leader, by state (active, draining).",
		}, []string{"state"}),
		StateCertRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_state_certificate_renewals_total",
			Help: "Certificate requests a data-plane replica made for its state endpoint, by reason (initial, expiring: a third of its life left, csr_gone: the pending request was deleted, ca_changed: the control role's published CAs differ from the certificate's).",
		}, []string{"reason"}),
		StateCertFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zerodrop_state_certificate_failures_total",
			Help: "Failed steps of a data-plane replica's state endpoint certificate, by stage (create, read: a pending request, denied, invalid: the issued certificate, ca_read: the control role's published CAs); each is logged with its error and retried with back-off.",
		}, []string{"stage"}),
		ServicesOverLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zerodrop_services_over_limit",
			Help: "Services over a cap of the controller, by limit (ports): one not served yet is not served, one served before keeps its listeners as they were, backends following its endpoints.",
		}, []string{"limit"}),
		HealthCheckStretched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zerodrop_health_check_stretched_services",
			Help: "Services whose health-check intervals are stretched to fit the per-Service check rate or the per-replica check budget (the newest yield first).",
		}),
		HealthCheckRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zerodrop_health_checks_per_second",
			Help: "Health checks per second the load balancers this replica last wrote run: backends divided by check interval, summed over every listener.",
		}),
		WaitingForReplicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zerodrop_load_balancers_waiting_for_replicas",
			Help: "Control role (the leader): load balancers with a Service that a data-plane replica that counts does not serve yet, or that no replica counts for, or a deleted Service's listener on a replica that does not answer. Each is looked at again as long after a look as it has waited (from the drain poll interval up to its tenfold), and at once when a replica's pod changes or a replica answers again.",
		}),
		TCPMigrateReq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zerodrop_node_tcp_migrate_req",
			Help: "Data-plane replica: its node's net.ipv4.tcp_migrate_req, read at start: 1, the connections queued on the listeners of an HAProxy that stops softly (a DaemonSet update) move to the node's other listeners of those ports; 0, they are reset; -1, it cannot be read (Linux before 5.14). The control role leaves it at 0.",
		}),
	}
	m.BuildInfo.WithLabelValues(version.String(), runtime.Version()).Set(1)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ProviderWrites, m.ProviderReads, m.ProviderConflicts,
			m.ProviderErrors, m.Reconciles, m.ReconcileLatency, m.PlanOps, m.DrainCalls, m.DrainOutcomes, m.DrainWait, m.BuildInfo,
			m.StateCertRenewals, m.StateCertFailures,
			m.GateLatency, m.GateUnserved, m.Backends, m.ServicesOverLimit, m.HealthCheckStretched, m.HealthCheckRate, m.WaitingForReplicas, m.TCPMigrateReq} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// ProviderHooks counts a provider's reads and writes under its name.
func (m *Metrics) ProviderHooks(providerName string) provider.Hooks {
	return provider.Hooks{
		Write: func(op string) { m.ProviderWrites.WithLabelValues(providerName, op).Inc() },
		Read:  func(op string) { m.ProviderReads.WithLabelValues(providerName, op).Inc() },
	}
}

// Sum adds up every series of a counter or gauge vector (0 when it has none);
// benchmarks and the lab read their figures with it. The values are read
// by promtext, the project's one reader of metric values, from what a
// registry of c alone gathers: an in-process count and a scraped one are
// read the same way.
func Sum(c prometheus.Collector) float64 {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return 0
	}
	// A failed Gather still returns what it could gather, and Sum, a
	// figure for a test or the lab, counts that.
	mfs, _ := reg.Gather()
	m := promtext.Gathered(mfs)
	total := 0.0
	for name := range m {
		v, _ := m.Sum(name)
		total += v
	}
	return total
}
