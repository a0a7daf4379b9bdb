package check_test

import (
	"fmt"
	"testing"
)

// A Service may select pods by a label their controller sets, not the pod
// template (issue 54): a per-pod Service of a StatefulSet selects
// statefulset.kubernetes.io/pod-name (or apps.kubernetes.io/pod-index), and
// controller-revision-hash, pod-template-generation and pod-template-hash
// are on every pod of a StatefulSet or DaemonSet, a DaemonSet, a Deployment.
// Such a Service selects the workload (it is checked: ZD101 on its
// container), and is no ZD403; a label of another controller, another
// StatefulSet's pod or an ordinal it cannot have still selects nothing.
func TestControllerAddedLabels(t *testing.T) {
	workload := func(kind, name, extra string) string {
		return fmt.Sprintf("apiVersion: apps/v1\nkind: %s\nmetadata: {name: %s}\nspec:\n%s  selector: {matchLabels: {app: %s}}\n"+
			"  template:\n    metadata: {labels: {app: %s}}\n    spec: {containers: [{name: c, image: c, ports: [{containerPort: 80}]}]}\n",
			kind, name, extra, name, name)
	}
	service := func(selector string) string {
		return "apiVersion: v1\nkind: Service\nmetadata: {name: lb}\nspec: {type: LoadBalancer, selector: {" + selector + "}, ports: [{port: 80}]}\n"
	}
	for _, tc := range []struct {
		name, workload, selector string
		selects                  bool
	}{
		{"StatefulSet pod-name", workload("StatefulSet", "db", "  serviceName: db\n  replicas: 3\n"), "app: db, statefulset.kubernetes.io/pod-name: db-0", true},
		{"StatefulSet pod-name, last ordinal", workload("StatefulSet", "db", "  serviceName: db\n  replicas: 3\n"), "statefulset.kubernetes.io/pod-name: db-2", true},
		{"StatefulSet pod-name, ordinals start", workload("StatefulSet", "db", "  serviceName: db\n  ordinals: {start: 5}\n"), "statefulset.kubernetes.io/pod-name: db-5", true},
		{"StatefulSet pod-index", workload("StatefulSet", "db", "  serviceName: db\n  replicas: 2\n"), "app: db, apps.kubernetes.io/pod-index: \"1\"", true},
		{"StatefulSet controller-revision-hash", workload("StatefulSet", "db", "  serviceName: db\n"), "app: db, controller-revision-hash: db-5d8f7c9b6", true},
		{"DaemonSet controller-revision-hash", workload("DaemonSet", "agent", ""), "app: agent, controller-revision-hash: \"6f7b8c9d4\"", true},
		{"DaemonSet pod-template-generation", workload("DaemonSet", "agent", ""), "app: agent, pod-template-generation: \"3\"", true},
		{"Deployment pod-template-hash", workload("Deployment", "web", ""), "app: web, pod-template-hash: 7d9f8b6c5", true},
		{"another StatefulSet's pod", workload("StatefulSet", "db", "  serviceName: db\n"), "statefulset.kubernetes.io/pod-name: cache-0", false},
		{"an ordinal before the start", workload("StatefulSet", "db", "  serviceName: db\n  ordinals: {start: 5}\n"), "statefulset.kubernetes.io/pod-name: db-4", false},
		{"not an ordinal", workload("StatefulSet", "db", "  serviceName: db\n"), "statefulset.kubernetes.io/pod-name: db-x", false},
		{"a leading zero is not an ordinal", workload("StatefulSet", "db", "  serviceName: db\n"), "statefulset.kubernetes.io/pod-name: db-01", false},
		{"pod-name on a Deployment", workload("Deployment", "db", ""), "statefulset.kubernetes.io/pod-name: db-0", false},
		{"pod-template-hash on a StatefulSet", workload("StatefulSet", "db", "  serviceName: db\n"), "app: db, pod-template-hash: 7d9f8b6c5", false},
		{"pod-template-generation on a Deployment", workload("Deployment", "web", ""), "app: web, pod-template-generation: \"1\"", false},
		{"a label nobody sets", workload("StatefulSet", "db", "  serviceName: db\n"), "app: db, tier: backend", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := decodeFindings(t, run(t, service(tc.selector)+"---\n"+tc.workload, "-o", "json", "-").stdout)
			if got := countRule(fs, "ZD403") == 0 && countRule(fs, "ZD101") == 1; got != tc.selects {
				t.Errorf("selector {%s}: selects the workload %v, want %v; findings %v", tc.selector, got, tc.selects, fs)
			}
		})
	}
}
