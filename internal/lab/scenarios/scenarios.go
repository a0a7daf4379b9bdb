package scenarios

import (
	"context"
	"slices"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// scenario is one kind of disruption, run under traffic.
type scenario struct {
	Name     string
	about    string
	replicas int32
	// policy, when set, is the only traffic policy the scenario runs with
	// — unless policyDefault: then it is the default, and a traffic policy
	// given on the command line (Options.PolicyGiven) replaces it.
	policy        string
	policyDefault bool
	// act disrupts and returns once the workload is steady again.
	act func(ctx context.Context, r *run) error
	// lossless: a zerodrop run fails unless it lost nothing (see lossless).
	lossless bool
}

// Where each scenario runs, in which worlds and modes, is Table.

// All are the scenarios, in the order `all` runs them. Their acts are in one
// file per family: rollout.go (rollout, rollout-local), restart.go (restart,
// restart-idle), capacity.go (scale-down, drain-node), churn.go, chaos.go
// (kill-mid-plan, apiserver-down) and dataplane_scenario.go
// (lb-replica-restart, its phases the world's), lb_update.go (lb-update);
// runner.go runs one, and
// kube.go holds the Kubernetes changes the acts make.
var All = []scenario{
	{Name: "rollout", about: "rolling update of a 3-replica Deployment", replicas: replicas, act: actRollout},
	{Name: "rollout-local", about: "rolling update of a 1-replica Deployment behind an externalTrafficPolicy Local Service: the last pod of its node replaced by one on another node",
		replicas: 1, policy: PolicyLocal, act: actRolloutLocal},
	{Name: scenarioRestartIdle, about: "nothing changes: the load balancer's writer killed and restarted --idle-restarts times (default 6), SIGKILL and SIGTERM in turn, while WebSockets stay connected through an externalTrafficPolicy Local Service",
		replicas: replicas, policy: PolicyLocal, act: actRestartIdle},
	{Name: scenarioMaintenance, about: "a node serving the workload tainted ToBeDeletedByClusterAutoscaler (as the cluster autoscaler does before a drain), nothing else changed for --maintenance-wait (default 5 min: longer than the service controller's 100 s node resync), then the writer restarted as restart-idle does, WebSockets connected through an externalTrafficPolicy Local Service (Cluster with --traffic-policy cluster)",
		replicas: replicas, policy: PolicyLocal, policyDefault: true, act: actMaintenance},
	{Name: "restart", about: "the controller restarted 3 times during a rolling update", replicas: replicas, act: actRestart},
	{Name: "scale-down", about: "3 → 1 replicas", replicas: replicas, act: actScaleDown},
	{Name: "drain-node", about: "cordon a node, evict its pods through the eviction API", replicas: 4, act: actDrainNode},
	{Name: "churn", about: "repeated scale up/down while the Service's annotations and ports flip", replicas: replicas, act: actChurn},
	// Chaos (make chaos).
	{Name: report.ScenarioKillMidPlan, about: "the writer SIGKILLed at the first write of a plan, --kills times (default 20; 4 on the chart's install), during rolling updates",
		replicas: replicas, act: actKillMidPlan, lossless: true},
	{Name: report.ScenarioAPIServerDown, about: "kube-apiserver stopped for --apiserver-outage (default 30 s, longer than the leader's lease) while nothing changes",
		replicas: replicas, act: actAPIServerDown, lossless: true},
	// The HAProxy data plane of replicas (--data-plane-replicas).
	{Name: ScenarioLBReplicaRestart, about: "nothing changes: a data-plane replica's zerodrop process restarted (SIGKILL, SIGTERM) while its HAProxy serves; another replica replaced as a DaemonSet update does; then that one failing hard",
		replicas: replicas, act: actLBReplicaRestart},
	{Name: report.ScenarioLBUpdate, about: "nothing changes in the workload: the chart's data-plane DaemonSet updated (a pod-template annotation) with --data-plane-update's strategy, under the load, the 4 WebSockets and timed WebSockets whose lifetimes spread over 0–2× the old pods' drain bound",
		replicas: replicas, act: actLBUpdate},
}

// scenarioVariants are the variants sc runs in: all, or, for a scenario
// bound to a traffic policy, each backend once with that policy. A scenario
// whose policy is its default only (maintenance: the incident's cells are
// Local, and Cluster is run for a cell that loses) runs in all when the
// traffic policy was given (policyGiven).
func scenarioVariants(sc scenario, all []variant, policyGiven bool) []variant {
	if sc.Name == report.ScenarioKillMidPlan {
		// Node mode with Cluster sends to every node whatever the pods do:
		// a rollout makes no plan, so there is no plan to kill the writer in.
		all = slices.DeleteFunc(slices.Clone(all), func(v variant) bool { return v == variant{BackendNode, PolicyCluster} })
	}
	if sc.policy == "" || sc.policyDefault && policyGiven {
		return all
	}
	var out []variant
	seen := map[string]bool{}
	for _, v := range all {
		if !seen[v.backend] {
			seen[v.backend] = true
			out = append(out, variant{v.backend, sc.policy})
		}
	}
	return out
}

// ScenarioNamed finds a scenario of All by name.
func ScenarioNamed(name string) (scenario, bool) {
	for _, s := range All {
		if s.Name == name {
			return s, true
		}
	}
	return scenario{}, false
}
