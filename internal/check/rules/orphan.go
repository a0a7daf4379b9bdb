package rules

import (
	"fmt"
	"slices"
)

// checkSelectsNothing is ZD403: a LoadBalancer Service with a selector that
// matches no workload of its world. Either the workloads are elsewhere (an
// un-rendered kustomize base whose namespace comes from the kustomization,
// another file) and nothing behind the Service was checked, or the selector
// is wrong and the load balancer has no backend. A Service without selector
// never gets here: its endpoints are managed by hand.
func checkSelectsNothing(ix *index, selected map[*service]bool, cfg Config) []Finding {
	c := &check{ix: ix, cfg: cfg, ignore: map[string]string{}}
	for _, s := range ix.lbServices {
		if selected[s] {
			continue
		}
		keys := make([]string, 0, len(s.svc.Spec.Selector))
		for k, v := range s.svc.Spec.Selector {
			keys = append(keys, k+"="+v)
		}
		slices.Sort(keys)
		msg := fmt.Sprintf("the LoadBalancer Service selects no workload of this input in namespace %s (selector %v): nothing behind it was checked, "+
			"and if the selector is wrong the load balancer has no backend; the namespace may come from a kustomization, or the workloads from another file",
			namespace(s.svc.Namespace), keys)
		fix := "check the Service with its workloads in one stream (kustomize build DIR | zerodrop check -, or the files joined with --- separators on stdin), " +
			"or correct the selector to match the pod template's labels"
		c.addOn(s.src, s.id(), ignored(&s.svc.ObjectMeta), "ZD403", "", msg, fix)
	}
	return c.findings
}
