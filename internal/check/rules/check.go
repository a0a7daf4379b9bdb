package rules

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// check holds what every rule needs about one workload: the Services that
// select it, the load balancer's timing and the workload's suppressions.
type check struct {
	ix       *index
	w        *workload
	svcs     []*service
	cfg      Config
	timing   timing.Timing
	ignore   map[string]string // rule → reason, from the workload and every selecting Service
	nsLabels map[string]string
	nsAnnots map[string]string
	findings []Finding
}

func newCheck(ix *index, w *workload, svcs []*service, cfg Config) *check {
	c := &check{ix: ix, w: w, svcs: svcs, cfg: cfg, ignore: ignored(w.meta)}
	ts := make([]timing.Timing, len(svcs))
	for i, s := range svcs {
		ts[i] = timing.For(cfg.Provider, s.svc, cfg.Overrides)
		for id, reason := range ignored(&s.svc.ObjectMeta) {
			if _, ok := c.ignore[id]; !ok {
				c.ignore[id] = reason
			}
		}
	}
	c.timing = timing.Max(ts)
	if n := ix.byNS[w.ns]; n != nil {
		c.nsLabels = n.labels
		c.nsAnnots = n.annots
	}
	return c
}

func (c *check) run() {
	c.checkPorts()
	serving := c.servingContainers()
	var stopOrder map[string]bool // backends already reported by ZD208
	for _, ctr := range serving {
		c.checkProbes(ctr)
		c.checkPreStop(ctr)
		c.checkSidecarStop(ctr)
		c.checkSignalForwarding(ctr)
		c.checkStopOrder(ctr, &stopOrder)
	}
	c.checkReadinessGate()
	c.checkRollout()
	c.checkReplicas()
	c.checkReplicasWithHPA()
	c.checkPDB()
	c.checkSpreading()
	c.checkSpreadSelectors()
}

// add records a finding on the workload unless the rule is suppressed.
func (c *check) add(id, container, msg, fix string, explain ...string) {
	c.addOn(c.w.src, c.w.id(), nil, id, container, msg, fix, explain...)
}

// addSeverity records a finding on the workload with a severity other than
// the rule's default, for rules whose severity follows the resolved value.
func (c *check) addSeverity(sev Severity, id, container, msg, fix string, explain ...string) {
	n := len(c.findings)
	c.add(id, container, msg, fix, explain...)
	if len(c.findings) > n {
		c.findings[n].Severity = sev
	}
}

// addOn records a finding on any object; extra are that object's own
// suppressions (a Service's, for ZD402). A suppressed finding is kept, marked
// with its reason: it is counted, and SARIF carries it as suppressed.
func (c *check) addOn(src manifest.Source, object string, extra map[string]string, id, container, msg, fix string, explain ...string) {
	reason, suppressed := c.ignore[id]
	if r, ok := extra[id]; ok && !suppressed {
		reason, suppressed = r, true
	}
	r, ok := ByID(id)
	if !ok {
		panic(fmt.Sprintf("rules: unknown rule %s", id)) // a programming error, caught by the tests
	}
	c.findings = append(c.findings, Finding{
		Rule: id, Severity: r.Severity, Source: src.Plain(), Line: src.Line, Object: object,
		Container: container, Message: msg, Fix: fix, Explain: explain,
		Suppressed: suppressed, Reason: reason,
		at: src, fields: fieldPaths(kindOf(object), id, container),
	})
}

// local reports whether a selecting Service has externalTrafficPolicy Local,
// and returns the first such Service for messages.
func (c *check) local() (*service, bool) {
	for _, s := range c.svcs {
		if s.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			return s, true
		}
	}
	return nil, false
}

// replicas returns the replica count the rules reason about: an HPA's
// minReplicas when one scales the workload (it owns spec.replicas then),
// else spec.replicas with the API default 1. ok is false for DaemonSets,
// whose size is the node count.
func (c *check) replicas() (n int32, why string, ok bool) {
	if hpa := c.hpa(); hpa != nil {
		n := int32(1)
		why := fmt.Sprintf("HorizontalPodAutoscaler %s minReplicas unset, default 1", hpa.Name)
		if hpa.Spec.MinReplicas != nil {
			n = *hpa.Spec.MinReplicas
			why = fmt.Sprintf("HorizontalPodAutoscaler %s minReplicas %d", hpa.Name, n)
		}
		return n, why, true
	}
	if _, pod := c.w.obj.(*corev1.Pod); pod {
		return 1, "a bare Pod is one replica", true
	}
	r, ok := c.specReplicas()
	switch {
	case !ok:
		return 0, "", false
	case r == nil:
		return 1, "replicas unset, default 1", true
	}
	return *r, fmt.Sprintf("replicas %d", *r), true
}

// specReplicas is the workload's spec.replicas as written (nil: unset);
// ok is false for kinds without one (DaemonSets, Pods).
func (c *check) specReplicas() (r *int32, ok bool) {
	switch obj := c.w.obj.(type) {
	case *appsv1.Deployment:
		return obj.Spec.Replicas, true
	case *appsv1.StatefulSet:
		return obj.Spec.Replicas, true
	case *appsv1.ReplicaSet:
		return obj.Spec.Replicas, true
	}
	return nil, false
}

func (c *check) hpa() *autoscalingv2.HorizontalPodAutoscaler {
	n := c.ix.byNS[c.w.ns]
	if n == nil {
		return nil
	}
	for _, h := range n.hpas {
		if h.Spec.ScaleTargetRef.Kind == c.w.kind && h.Spec.ScaleTargetRef.Name == c.w.name {
			return h
		}
	}
	return nil
}

// checkReplicasWithHPA is ZD305: a HorizontalPodAutoscaler owns the
// replica count of the workload it scales, so a spec.replicas written in the
// same manifest is applied again on every apply (kubectl apply, a GitOps
// sync, helm upgrade) and resets the scaled fleet to that number at once:
// the pods above it stop together, and the remaining ones take their
// traffic until the autoscaler scales up again. The Kubernetes documentation
// says to remove spec.replicas from the manifest once an autoscaler manages
// the workload ("Migrating Deployments and StatefulSets to horizontal
// autoscaling", https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/).
// A fixed-size autoscaler (minReplicas = maxReplicas = spec.replicas) moves
// nothing and is left alone, and so are objects read from a cluster, where
// the API server sets spec.replicas whatever the manifest said.
func (c *check) checkReplicasWithHPA() {
	h := c.hpa()
	if h == nil || c.w.src.Cluster {
		return // a cluster's objects always have spec.replicas: it is not what a manifest applies
	}
	r, _ := c.specReplicas()
	if r == nil {
		return
	}
	lo := int32(1)
	if h.Spec.MinReplicas != nil {
		lo = *h.Spec.MinReplicas
	}
	if lo == h.Spec.MaxReplicas && lo == *r {
		return
	}
	c.add("ZD305", "",
		fmt.Sprintf("spec.replicas %d is set and HorizontalPodAutoscaler %s scales the workload (minReplicas %d, maxReplicas %d): every apply of this manifest resets the scaled fleet to %d at once, stopping the pods above it together while the load they served moves to the rest", *r, h.Name, lo, h.Spec.MaxReplicas, *r),
		"remove spec.replicas from the manifest and let the HorizontalPodAutoscaler own it (set its minReplicas instead)")
}

// gracePeriod applies the API default of 30 s.
func (c *check) gracePeriod() (int64, string) {
	if g := c.w.tmpl.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g, fmt.Sprintf("terminationGracePeriodSeconds %d", *g)
	}
	return corev1.DefaultTerminationGracePeriodSeconds,
		fmt.Sprintf("terminationGracePeriodSeconds unset (default %d)", corev1.DefaultTerminationGracePeriodSeconds)
}

// minReadySeconds returns ok false for kinds without a rollout that waits on
// it (ReplicaSets and Pods).
func (c *check) minReadySeconds() (int32, bool) {
	switch obj := c.w.obj.(type) {
	case *appsv1.Deployment:
		return obj.Spec.MinReadySeconds, true
	case *appsv1.StatefulSet:
		return obj.Spec.MinReadySeconds, true
	case *appsv1.DaemonSet:
		return obj.Spec.MinReadySeconds, true
	}
	return 0, false
}
