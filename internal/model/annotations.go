package model

// AnnotationDoc documents one annotation or label a user sets: docs/annotations.md
// is generated from the tables (cmd/zerodrop's TestReferenceDocs), so an
// annotation the code reads and the table lacks fails that test.
type AnnotationDoc struct {
	Key string
	// On is the object it goes on ("Service", "Pod", "Namespace label").
	On      string
	Default string
	Doc     string
}

// ServiceAnnotations are the zerodrop.dev/ annotations of a Service;
// ParseServiceConfig accepts exactly these and refuses any other under the
// prefix (a Warning Event and a condition, invariant 7).
var ServiceAnnotations = []AnnotationDoc{
	{AnnotationBackendMode, "Service", "the provider's: `ip` on HAProxy, `node` on Azure",
		"`ip`: the load balancer's backends are the pods' addresses; `node`: the nodes' addresses at the Service's nodePort (kube-proxy forwards; `externalTrafficPolicy` applies). Without the annotation a Service gets the provider's default, except IP mode where node mode cannot serve it (a port without a nodePort) or where the load balancer already serves it in IP mode (an earlier version's default: moving it would rewrite its pool under live connections). The `ConfigValid` condition says which mode applied and why."},
	{AnnotationHealthCheckInterval, "Service", DefaultHealthCheckInterval.String(),
		"Interval of the load balancer's health checks of each backend, 100ms to 1m. HAProxy: every data-plane replica checks every backend of every port, so the controller stretches it (by powers of two, a Warning Event `HealthChecksStretched`) for a Service over `--service-check-limit` checks a second, or past what older Services leave of `--node-check-budget` (docs/haproxy.md)."},
	{AnnotationDrainTimeout, "Service", DefaultDrainTimeout.String(),
		"How long a leaving backend stays in drain (no new connections) before it is removed with connections still open, 0 to 1h. A node labelled or tainted to leave waits for its connections instead while its Node stands."},
	{AnnotationMaxUnavailable, "Service", DefaultMaxUnavailable.String(),
		"The share (`25%`) or count (`2`) of serving backends one step of a change may remove."},
	{AnnotationAddress, "Service", "allocated from the pool",
		"HAProxy: the frontend address the Service asks for, in the address pool and unused (`spec.loadBalancerIP` is read when this is absent)."},
	{AnnotationGateOnly, "Service", "false",
		"`true`: another controller (on Azure the cloud's own) writes this Service's load balancer; zerodrop only serves the readiness and termination gates for its pods, reading that load balancer, and never writes it. Needs `--azure-gate-only-load-balancers`."},
	{AnnotationIgnore, "any object", "",
		"Read by `zerodrop check`: rules to suppress on this object, with a reason (`ZD101: why; ZD301: why`); the controller accepts it."},
}

func init() {
	for _, a := range ServiceAnnotations {
		knownAnnotations[a.Key] = true
	}
}
