package rules

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/check/timing"
)

// Readiness gates the rules recognise, and the signals that a webhook or
// controller will inject one into the pods.
const (
	ZerodropGate        = "zerodrop.dev/load-balancer-ready"
	AWSGatePrefix       = "target-health.elbv2.k8s.aws/"
	GKENEGGate          = "cloud.google.com/load-balancer-neg-ready"
	awsInjectLabel      = "elbv2.k8s.aws/pod-readiness-gate-inject"
	gkeNEGAnnotation    = "cloud.google.com/neg"
	hostnameTopologyKey = "kubernetes.io/hostname"
)

// readinessGate returns how the pods get a load-balancer readiness gate, or
// "" when they do not.
func (c *check) readinessGate() string {
	for _, g := range c.w.tmpl.Spec.ReadinessGates {
		t := string(g.ConditionType)
		if t == ZerodropGate || t == GKENEGGate || strings.HasPrefix(t, AWSGatePrefix) {
			return "readiness gate " + t
		}
	}
	if c.nsLabels[InjectLabel] == "enabled" {
		return "zerodrop readiness gate injected (namespace label " + InjectLabel + "=enabled)"
	}
	if c.nsLabels[awsInjectLabel] == "enabled" {
		return "AWS target-health readiness gate injected (namespace label " + awsInjectLabel + "=enabled)"
	}
	for _, s := range c.svcs {
		if _, ok := s.svc.Annotations[gkeNEGAnnotation]; ok {
			return "GKE NEG readiness gate injected (Service " + s.ref() + " has " + gkeNEGAnnotation + ")"
		}
	}
	return ""
}

// checkReadinessGate is ZD103 and ZD104.
func (c *check) checkReadinessGate() {
	if c.readinessGate() != "" {
		return
	}
	// On a node-backed load balancer with Cluster the nodes stay
	// registered: a new pod gets traffic once kube-proxy programs it, and
	// there is no registration to wait for.
	path := c.timing.Path
	if !path.Registers() {
		return
	}
	reg := c.timing.Registration
	regWhy := "registration: " + c.timing.RegistrationWhy
	consequence := ""
	if _, rolls := c.minReadySeconds(); rolls {
		consequence = ", and the rollout removes an old pod meanwhile"
	}
	c.add("ZD103", "",
		fmt.Sprintf("no load-balancer readiness gate (%s): a new pod turns Ready when its readinessProbe passes, up to %d s before the load balancer sends it traffic%s", path.Desc, reg, consequence),
		fmt.Sprintf("enable the zerodrop readiness gate (label the namespace %s=enabled, or add readinessGates: [{conditionType: %s}]); the AWS Load Balancer Controller's and GKE's NEG gates count too", InjectLabel, ZerodropGate),
		regWhy)
	if mrs, ok := c.minReadySeconds(); ok && int(mrs) < reg {
		c.add("ZD104", "",
			fmt.Sprintf("no readiness gate and minReadySeconds %d is shorter than the load balancer's registration time of %d s: the rollout counts a new pod available before it receives traffic", mrs, reg),
			fmt.Sprintf("set minReadySeconds: %d, or use a readiness gate (ZD103)", reg),
			regWhy, fmt.Sprintf("minReadySeconds %d < %d s", mrs, reg))
	}
}

// checkRollout is ZD301 and ZD302.
func (c *check) checkRollout() {
	switch obj := c.w.obj.(type) {
	case *appsv1.Deployment:
		st := obj.Spec.Strategy
		if st.Type == appsv1.RecreateDeploymentStrategyType {
			c.add("ZD302", "",
				fmt.Sprintf("strategy Recreate stops every pod before starting the new ones: the load balancer has no backend until new pods are Ready and registered (%d s later)", c.timing.Registration),
				"use strategy RollingUpdate with maxUnavailable: 0 and maxSurge: 1")
			return
		}
		mu, what := intstr.FromString("25%"), "maxUnavailable unset (default 25%)"
		if st.RollingUpdate != nil && st.RollingUpdate.MaxUnavailable != nil {
			mu, what = *st.RollingUpdate.MaxUnavailable, "maxUnavailable "+st.RollingUpdate.MaxUnavailable.String()
		}
		c.maxUnavailable(mu, what, "set strategy.rollingUpdate.maxUnavailable: 0 and maxSurge: 1 (or 25%), so new pods are ready and registered before old ones stop")
	case *appsv1.DaemonSet:
		st := obj.Spec.UpdateStrategy
		if st.Type == appsv1.OnDeleteDaemonSetStrategyType {
			return
		}
		mu, what := intstr.FromInt32(1), "maxUnavailable unset (default 1)"
		if st.RollingUpdate != nil && st.RollingUpdate.MaxUnavailable != nil {
			mu, what = *st.RollingUpdate.MaxUnavailable, "maxUnavailable "+st.RollingUpdate.MaxUnavailable.String()
		}
		c.maxUnavailable(mu, what, "set updateStrategy.rollingUpdate.maxSurge: 1 and maxUnavailable: 0, so each node's new pod is ready before the old one stops (not possible with hostPort)")
	}
}

// maxUnavailable is ZD301, with the severity of the resolved value: a
// maxUnavailable that resolves to 0 pods (the default 25% of up to 3
// replicas) makes the rollout surge first and is no finding; one that can
// stop every serving pod (1 of 1) is an error; anything else a warning.
// With a HorizontalPodAutoscaler the value is also resolved at maxReplicas,
// where the next rollout may run.
func (c *check) maxUnavailable(mu intstr.IntOrString, what, fix string) {
	n, why, ok := c.replicas()
	if !ok {
		// A DaemonSet's size is its node count, unknown here; the
		// controller rounds a percentage up, so any positive value takes
		// at least one node's pod out.
		v, err := intstr.GetScaledValueFromIntOrPercent(&mu, 100, true)
		if err != nil || v <= 0 {
			return
		}
		c.add("ZD301", "", fmt.Sprintf("RollingUpdate %s: the rollout stops a node's pod before its replacement is ready and registered with the load balancer", what), fix)
		return
	}
	// The Deployment controller rounds maxUnavailable down.
	resolve := func(replicas int32) int {
		v, err := intstr.GetScaledValueFromIntOrPercent(&mu, int(replicas), false)
		if err != nil || v < 0 {
			return 0
		}
		return v
	}
	v, atMax, maxWhy := resolve(n), 0, ""
	if h := c.hpa(); h != nil && h.Spec.MaxReplicas > n {
		atMax = resolve(h.Spec.MaxReplicas)
		maxWhy = fmt.Sprintf("HorizontalPodAutoscaler %s maxReplicas %d", h.Name, h.Spec.MaxReplicas)
	}
	if v == 0 && atMax == 0 {
		return
	}
	sev := Warning
	var msg string
	switch {
	case v > 0 && v >= int(n):
		sev = Error
		msg = fmt.Sprintf("RollingUpdate %s resolves to %d of %d pods (%s): the rollout can stop %s before a replacement is ready and registered, leaving the load balancer without a backend", what, v, n, why, allPods(n))
	case v > 0:
		msg = fmt.Sprintf("RollingUpdate %s resolves to %d of %d pods (%s): the rollout takes pods out of service before their replacements are ready and registered with the load balancer", what, v, n, why)
	default:
		msg = fmt.Sprintf("RollingUpdate %s resolves to 0 of %d pods now (%s) but to %d at %s: once scaled up, the rollout takes pods out of service before their replacements are ready and registered with the load balancer", what, n, why, atMax, maxWhy)
	}
	c.addSeverity(sev, "ZD301", "", msg, fix)
}

// checkReplicas is ZD303.
func (c *check) checkReplicas() {
	n, why, ok := c.replicas()
	if !ok || n >= 2 {
		return
	}
	c.add("ZD303", "",
		fmt.Sprintf("%s: with fewer than 2 pods every rollout, eviction or crash leaves the load balancer without a ready backend", why),
		"run at least 2 replicas (spec.replicas, or the HorizontalPodAutoscaler's minReplicas)")
}

// checkPDB is ZD304. DaemonSets are left out: node drains skip their pods.
func (c *check) checkPDB() {
	n, _, ok := c.replicas()
	if !ok {
		return
	}
	ns := c.ix.byNS[c.w.ns]
	set := labels.Set(c.w.tmpl.Labels)
	var names []string
	if ns != nil {
		for _, b := range ns.pdbs {
			if b.err != nil || !b.sel.Matches(set) {
				continue
			}
			pdb := b.pdb
			allowed, what := pdbAllows(pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable, n)
			if allowed < int(n) {
				return // this budget keeps at least one pod
			}
			names = append(names, fmt.Sprintf("%s (%s)", pdb.Name, what))
		}
	}
	fix := "add a PodDisruptionBudget selecting the pods with maxUnavailable: 1 (and run at least 2 replicas)"
	msg := "no PodDisruptionBudget selects the pods: a node drain or cluster upgrade may evict all of them at once"
	if len(names) > 0 {
		msg = fmt.Sprintf("PodDisruptionBudget %s allows %s to be evicted at once", strings.Join(names, ", "), allPods(n))
	}
	if n == 1 {
		// One pod is where ZD303 and this rule meet, but the eviction is a
		// path of its own: it does not surge as a maxUnavailable 0 rollout
		// does (the ReplicaSet creates the replacement only once the pod is
		// terminating), and only a budget makes a drain wait for it.
		msg += ": an eviction does not surge (the replacement is only created once the pod is terminating), so the load balancer has no ready backend until the replacement is Ready and registered, whatever the rollout strategy"
		fix = "run at least 2 replicas with a PodDisruptionBudget maxUnavailable: 1; to keep one replica, a PodDisruptionBudget with maxUnavailable: 0 makes drains wait until the pod is moved by a surge rollout (kubectl rollout restart once the node is cordoned)"
	}
	c.add("ZD304", "", msg, fix)
}

func allPods(n int32) string {
	if n == 1 {
		return "the only pod"
	}
	return fmt.Sprintf("all %d pods", n)
}

// pdbAllows returns how many of n pods the budget lets go at once, as the
// disruption controller computes it (percentages rounded up; neither field
// set allows everything).
func pdbAllows(minAvailable, maxUnavailable *intstr.IntOrString, n int32) (int, string) {
	switch {
	case maxUnavailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(maxUnavailable, int(n), true)
		if err != nil {
			return 0, "invalid maxUnavailable"
		}
		return v, "maxUnavailable " + maxUnavailable.String()
	case minAvailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(minAvailable, int(n), true)
		if err != nil {
			return 0, "invalid minAvailable"
		}
		return int(n) - v, "minAvailable " + minAvailable.String()
	}
	return int(n), "neither minAvailable nor maxUnavailable set"
}

// checkSpreading is ZD401, for kinds that run several pods anywhere:
// DaemonSets run one per node and bare Pods one in all. Only a Service whose
// load balancer balances across nodes counts: one that targets pod IPs
// balances across pods, and Local plays no part in its traffic.
func (c *check) checkSpreading() {
	var svc *service
	var path timing.Path
	for _, s := range c.svcs {
		if p := timing.PathOf(c.cfg.Provider, s.svc); p.Local && !p.PodTargets {
			svc, path = s, p
			break
		}
	}
	if svc == nil {
		return
	}
	switch c.w.obj.(type) {
	case *appsv1.Deployment, *appsv1.StatefulSet, *appsv1.ReplicaSet:
	default:
		return
	}
	if spreadsByHostname(&c.w.tmpl.Spec, labels.Set(c.w.tmpl.Labels)) {
		return
	}
	c.add("ZD401", "",
		fmt.Sprintf("Service %s has externalTrafficPolicy Local but nothing spreads the pods across nodes: the load balancer balances across nodes, so pods packed on one node share one node's traffic, and draining that node removes several backends at once", svc.ref()),
		"add a topologySpreadConstraint (topologyKey: kubernetes.io/hostname, maxSkew: 1) or a podAntiAffinity on kubernetes.io/hostname whose labelSelector selects the pods' own labels",
		"path: "+path.Desc)
}

// spreadsByHostname reports whether anti-affinity or a topology spread
// constraint on the hostname key applies to the pods' own labels.
func spreadsByHostname(spec *corev1.PodSpec, own labels.Set) bool {
	selects := func(ls *metav1.LabelSelector) bool {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		return err == nil && sel.Matches(own)
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		if tsc.TopologyKey == hostnameTopologyKey && selects(tsc.LabelSelector) {
			return true
		}
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
		return false
	}
	aa := spec.Affinity.PodAntiAffinity
	for _, t := range aa.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == hostnameTopologyKey && selects(t.LabelSelector) {
			return true
		}
	}
	for _, w := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
		if w.PodAffinityTerm.TopologyKey == hostnameTopologyKey && selects(w.PodAffinityTerm.LabelSelector) {
			return true
		}
	}
	return false
}

// checkSpreadSelectors is ZD404: a topology spread constraint, or a pod
// anti-affinity term, whose label selector matches none of the workload's
// own pods spreads nothing — the scheduler counts (or avoids) only the pods
// the selector matches. An anti-affinity term is reported only when nothing
// else spreads the pods (no term or constraint selects them), its keys are
// all label keys of the pods themselves, and it selects no pod template of
// the input: keeping away from another workload is intended.
func (c *check) checkSpreadSelectors() {
	switch c.w.obj.(type) {
	case *appsv1.Deployment, *appsv1.StatefulSet, *appsv1.ReplicaSet:
	default:
		return
	}
	n, why, _ := c.replicas()
	if h := c.hpa(); h != nil && h.Spec.MaxReplicas > n {
		n, why = h.Spec.MaxReplicas, fmt.Sprintf("HorizontalPodAutoscaler %s maxReplicas %d", h.Name, h.Spec.MaxReplicas)
	}
	if n < 2 {
		return // one pod: nothing to spread
	}
	spec := &c.w.tmpl.Spec
	own := labels.Set(c.w.tmpl.Labels)
	fix := fmt.Sprintf("make the labelSelector select the pods' own labels (%s)", labels.FormatLabels(own))
	explain := []string{why}
	if len(c.svcs) > 0 {
		explain = append(explain, "path: "+timing.PathOf(c.cfg.Provider, c.svcs[0].svc).Desc)
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		if selectsSet(tsc.LabelSelector, own) {
			continue
		}
		c.add("ZD404", "",
			fmt.Sprintf("the topologySpreadConstraint on %s selects %s, which matches none of the pods' own labels (%s): the scheduler counts only the pods it selects, so it does not spread these %d replicas, and they may all land in one %s",
				tsc.TopologyKey, selectorString(tsc.LabelSelector), labels.FormatLabels(own), n, domain(tsc.TopologyKey)),
			fix, explain...)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
		return
	}
	aa := spec.Affinity.PodAntiAffinity
	terms := append([]corev1.PodAffinityTerm(nil), aa.RequiredDuringSchedulingIgnoredDuringExecution...)
	for _, w := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, w.PodAffinityTerm)
	}
	if spreadsItself(spec, own) {
		return // the other terms are about other workloads
	}
	for _, t := range terms {
		if len(t.Namespaces) > 0 || t.NamespaceSelector != nil || selectsSet(t.LabelSelector, own) ||
			!ownKeys(t.LabelSelector, own) || c.selectsAnyTemplate(t.LabelSelector) {
			continue
		}
		c.add("ZD404", "",
			fmt.Sprintf("the podAntiAffinity term on %s selects %s, which matches none of the pods' own labels (%s) nor any other pod of the input: it keeps these %d replicas apart from nothing, and they may all land in one %s",
				t.TopologyKey, selectorString(t.LabelSelector), labels.FormatLabels(own), n, domain(t.TopologyKey)),
			fix, explain...)
	}
}

// spreadsItself reports whether any topology spread constraint or
// anti-affinity term, on any key, selects the pods' own labels.
func spreadsItself(spec *corev1.PodSpec, own labels.Set) bool {
	for _, tsc := range spec.TopologySpreadConstraints {
		if selectsSet(tsc.LabelSelector, own) {
			return true
		}
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
		return false
	}
	aa := spec.Affinity.PodAntiAffinity
	for _, t := range aa.RequiredDuringSchedulingIgnoredDuringExecution {
		if selectsSet(t.LabelSelector, own) {
			return true
		}
	}
	for _, w := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
		if selectsSet(w.PodAffinityTerm.LabelSelector, own) {
			return true
		}
	}
	return false
}

// selectsSet reports whether a label selector matches set; a nil selector
// matches nothing, as the scheduler reads it.
func selectsSet(ls *metav1.LabelSelector, set labels.Set) bool {
	if ls == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	return err == nil && sel.Matches(set)
}

// ownKeys reports whether every key the selector tests is a label key of the
// pods: a selector written for these pods, with values that do not match.
func ownKeys(ls *metav1.LabelSelector, own labels.Set) bool {
	if ls == nil || (len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0) {
		return false
	}
	for k := range ls.MatchLabels {
		if !own.Has(k) {
			return false
		}
	}
	for _, e := range ls.MatchExpressions {
		if !own.Has(e.Key) {
			return false
		}
	}
	return true
}

// selectsAnyTemplate reports whether the selector matches the pod template
// of any workload of the input in the workload's namespace.
func (c *check) selectsAnyTemplate(ls *metav1.LabelSelector) bool {
	for _, w := range c.ix.workloads {
		if w.ns == c.w.ns && selectsSet(ls, labels.Set(w.tmpl.Labels)) {
			return true
		}
	}
	return false
}

func selectorString(ls *metav1.LabelSelector) string {
	if ls == nil {
		return "nothing (no labelSelector)"
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "an invalid selector"
	}
	return "{" + sel.String() + "}"
}

func domain(topologyKey string) string {
	switch topologyKey {
	case hostnameTopologyKey:
		return "node"
	case "topology.kubernetes.io/zone":
		return "zone"
	}
	return topologyKey + " domain"
}
