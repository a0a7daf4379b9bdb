package azure

import (
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// Two writers on one load balancer (Options.SharedLB): zerodrop beside
// cloud-provider-azure's CCM on the CCM's internal load balancer, as an
// AKS user would run zerodrop beside the managed CCM (a Standard load
// balancer cannot mix public and private frontends, so the shared one is
// the CCM's internal one). The CCM writes the run's other Services,
// zerodrop the workload's, in zd- children it adds to the CCM's load
// balancer. Per writer the run reports its writes, 412s, 409s, superseded
// operations, the Warning Events on its Services, and every child of the
// other writer one of its writes removed; neither may remove the other's.

// ccmRuns says whether the run starts the CCM: the writer of the upstream,
// recipe and gates modes, and zerodrop's neighbour on a shared load
// balancer.
func (a *run) ccmRuns() bool {
	return a.env.Mode.NodeBacked() || a.w.opts.SharedLB
}

// writerFigures splits a stretch of the record by writer (the CCM's
// identities are ccm-N) and finds each writer's removals of the other's
// children: zerodrop's are named zd-, the CCM's are not.
func writerFigures(calls []azurearm.Call) []report.WriterFigures {
	// Both writers are listed, a writer that wrote nothing too.
	byWriter := map[string][]azurearm.Call{zerodropIdentity: nil, ccmWriter: nil}
	order := []string{zerodropIdentity, ccmWriter}
	for _, c := range calls {
		name := c.Client
		if strings.HasPrefix(name, "ccm-") {
			name = ccmWriter
		}
		if _, ok := byWriter[name]; !ok {
			order = append(order, name)
		}
		byWriter[name] = append(byWriter[name], c)
	}
	var list []report.WriterFigures
	for _, name := range order {
		mine := byWriter[name]
		f := figuresOf(mine)
		w := report.WriterFigures{Writer: name, Writes: f.writes, PreconditionFailed: f.preconditionFailed,
			Conflicts: f.conflicts, Superseded: f.superseded}
		for _, c := range mine {
			if c.Kind != "loadBalancer" || c.Method != http.MethodPut && c.Method != http.MethodDelete {
				continue // a pool's write removes addresses, not another writer's children
			}
			owned := func(child string) bool { return strings.HasPrefix(child, "zd-") == (c.Client == zerodropIdentity) }
			for _, ch := range c.Changes {
				if child, ok := removedChild(ch); ok && !owned(child) {
					w.RemovedOthers = append(w.RemovedOthers, child)
				}
			}
		}
		list = append(list, w)
	}
	return list
}

// ccmWriter names the CCM's processes together in the writers' figures.
const ccmWriter = "upstream (cloud-provider-azure)"

// removedChild is the load-balancer child a Changes line of a load
// balancer's write removes whole: "- properties.<collection>[<name>].name = …".
func removedChild(line string) (string, bool) {
	if !strings.HasPrefix(line, "- properties.") {
		return "", false
	}
	path := changePath(line)
	open, close := strings.IndexByte(path, '['), strings.IndexByte(path, ']')
	if open < 0 || close < open || path[close+1:] != ".name" {
		return "", false
	}
	switch path[len("properties."):open] {
	case "frontendIPConfigurations", "backendAddressPools", "loadBalancingRules", "probes":
		return path[open+1 : close], true
	}
	return "", false
}

// sharedWarnings adds to each writer's figures the Warning Events of its
// Services: the other Services are the CCM's, the workload's zerodrop's.
func sharedWarnings(figures []report.WriterFigures, events []corev1.Event) {
	for i := range figures {
		ccm := figures[i].Writer == ccmWriter
		for _, e := range events {
			if strings.HasPrefix(e.InvolvedObject.Name, "svc-") == ccm {
				figures[i].WarningEvents += serviceWarning(e)
			}
		}
	}
}
