// Package rules holds zerodrop check's rollout-safety rules ZD101–ZD404. The
// rules only look at workloads selected by a Service of type LoadBalancer:
// that is where a rollout can drop traffic the cluster cannot re-route.
package rules

import (
	"cmp"
	"slices"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// Severity is "error" or "warning". An error makes zerodrop check exit 1.
type Severity string

// Severities.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Rule describes one rule. The IDs and severities are a stable contract
// (DESIGN.md, "Contract: zerodrop check").
type Rule struct {
	ID       string
	Severity Severity
	// Title is a one-line description, used as SARIF's shortDescription.
	Title string
}

// All lists every rule in ID order.
var All = []Rule{
	{"ZD101", Error, "A serving container has no readinessProbe"},
	{"ZD102", Warning, "The readinessProbe equals the livenessProbe"},
	{"ZD103", Warning, "No load-balancer readiness gate"},
	{"ZD104", Warning, "No readiness gate and minReadySeconds shorter than the load balancer's registration time"},
	{"ZD105", Warning, "The livenessProbe kills the container before its readinessProbe first checks it, and there is no startupProbe"},
	{"ZD201", Error, "No preStop delay"},
	{"ZD202", Error, "The preStop delay is shorter than the load balancer's deregistration time"},
	{"ZD203", Error, "terminationGracePeriodSeconds is not longer than the preStop delay"},
	{"ZD204", Warning, "externalTrafficPolicy Local and the pod stops serving before the load balancer has deregistered the node"},
	{"ZD205", Warning, "terminationGracePeriodSeconds is shorter than the load balancer's deregistration time and there is no preStop delay, or one of unknown length (error at 0)"},
	{"ZD206", Warning, "A sidecar the serving container needs stops before the load balancer has deregistered the pod (error when the sidecar carries the Service's connections)"},
	{"ZD207", Warning, "The container's shell stays PID 1 and does not pass SIGTERM on to the server"},
	{"ZD208", Error, "A container the serving container forwards to on localhost stops no later than it"},
	{"ZD301", Warning, "RollingUpdate maxUnavailable resolves to at least one pod (error when it can stop every serving pod)"},
	{"ZD302", Error, "Deployment strategy Recreate"},
	{"ZD303", Warning, "Fewer than 2 replicas"},
	{"ZD304", Warning, "No PodDisruptionBudget protects the pods"},
	{"ZD305", Warning, "spec.replicas is set on a workload a HorizontalPodAutoscaler scales"},
	{"ZD401", Warning, "externalTrafficPolicy Local without spreading pods across nodes"},
	{"ZD402", Error, "The Service's targetPort matches no container port"},
	{"ZD403", Warning, "A LoadBalancer Service selects no workload"},
	{"ZD404", Warning, "A topology spread constraint or pod anti-affinity term selects none of the workload's own pods"},
}

// ByID returns the rule with the given ID.
func ByID(id string) (Rule, bool) {
	i := slices.IndexFunc(All, func(r Rule) bool { return r.ID == id })
	if i < 0 {
		return Rule{}, false
	}
	return All[i], true
}

// Finding is one rule violation.
type Finding struct {
	Rule     string
	Severity Severity
	Source   manifest.Source
	// Line is the object's line, or after Report.ResolveLines the line of
	// the offending field where the rule knows it (the container for ZD101,
	// the strategy for ZD301); 0 when unknown (a cluster, a helm template).
	Line int
	// Object is Kind/namespace/name, namespace "default" when unset.
	Object string
	// Container is empty for findings about the whole pod or workload.
	Container string
	Message   string
	Fix       string
	// Explain holds the arithmetic behind the finding, for --explain.
	Explain []string
	// Suppressed is set by a zerodrop.dev/ignore annotation, whose Reason
	// says why: the finding is counted but neither printed nor failing.
	Suppressed bool
	Reason     string

	at     manifest.Source // with its locator, for ResolveLines
	fields [][]string
}

// Config selects the load-balancer timings.
type Config struct {
	Provider  timing.Provider
	Overrides timing.Overrides
}

// Report is the outcome of one analysis.
type Report struct {
	Findings []Finding
	// Workloads counts the workloads selected by a LoadBalancer Service,
	// Services the LoadBalancer Services: what the rules looked at.
	Workloads int
	Services  int
	// Notes are remarks for stderr (suppressions without a reason).
	Notes []string
}

// Errors counts the findings of severity error that are not suppressed.
func (r Report) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == Error && !f.Suppressed {
			n++
		}
	}
	return n
}

// Suppressed counts the suppressed findings.
func (r Report) Suppressed() int {
	n := 0
	for _, f := range r.Findings {
		if f.Suppressed {
			n++
		}
	}
	return n
}

// Analyze applies every rule to the objects. The result is sorted by source,
// object, rule and container, so that output is stable.
func Analyze(objs []manifest.Object, cfg Config) Report {
	if cfg.Provider == "" {
		cfg.Provider = timing.Generic
	}
	ix := buildIndex(objs)
	var rep Report
	rep.Services = len(ix.lbServices)
	rep.Notes = ignoreNotes(ix)
	selected := map[*service]bool{}
	for _, w := range ix.workloads {
		svcs := ix.selecting(w)
		if len(svcs) == 0 {
			continue
		}
		for _, s := range svcs {
			selected[s] = true
		}
		rep.Workloads++
		c := newCheck(ix, w, svcs, cfg)
		c.run()
		rep.Findings = append(rep.Findings, c.findings...)
	}
	rep.Findings = append(rep.Findings, checkSelectsNothing(ix, selected, cfg)...)
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.Source.File, b.Source.File),
			cmp.Compare(a.Source.Line, b.Source.Line),
			cmp.Compare(a.Object, b.Object),
			cmp.Compare(a.Rule, b.Rule),
			cmp.Compare(a.Container, b.Container),
			cmp.Compare(a.Message, b.Message),
		)
	})
	return rep
}
