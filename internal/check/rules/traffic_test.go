package rules_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// find returns the finding of rule id, if any.
func find(rep rules.Report, id string) (rules.Finding, bool) {
	i := slices.IndexFunc(rep.Findings, func(f rules.Finding) bool { return f.Rule == id })
	if i < 0 {
		return rules.Finding{}, false
	}
	return rep.Findings[i], true
}

// TestRegistrationRulesFollowTheTrafficPath: ZD103 and ZD104 exist only
// where the load balancer registers pods (IP targets) or nodes by their
// local endpoints (externalTrafficPolicy Local). A node-backed load
// balancer with Cluster probes nodes, and a new pod gets traffic as soon as
// kube-proxy programs it.
func TestRegistrationRulesFollowTheTrafficPath(t *testing.T) {
	nlb := map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
	ipNLB := map[string]string{
		"service.beta.kubernetes.io/aws-load-balancer-type":            "external",
		"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
	}
	tests := []struct {
		name     string
		provider timing.Provider
		etp      corev1.ServiceExternalTrafficPolicy
		ann      map[string]string
		fires    bool
		contains string // in the ZD103 message: the path it names
	}{
		{"generic, Cluster: kube-proxy path", timing.Generic, "", nil, false, ""},
		{"generic, explicit Cluster", timing.Generic, corev1.ServiceExternalTrafficPolicyCluster, nil, false, ""},
		{"azure, Cluster", timing.Azure, "", nil, false, ""},
		{"gke, Cluster", timing.GKE, corev1.ServiceExternalTrafficPolicyCluster, nil, false, ""},
		{"aws in-tree NLB, Cluster: instance targets", timing.AWS, "", nlb, false, ""},
		{"aws instance target type, Cluster", timing.AWS, "", map[string]string{"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "instance"}, false, ""},
		{"aws IP targets, Cluster", timing.AWS, "", ipNLB, true, "registers pod IPs"},
		{"aws legacy nlb-ip, Cluster", timing.AWS, "", map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb-ip"}, true, "registers pod IPs"},
		{"haproxy (zerodrop) registers pods", timing.HAProxy, "", nil, true, "registers pod IPs"},
		{"generic, Local", timing.Generic, corev1.ServiceExternalTrafficPolicyLocal, nil, true, "node-backed, Local"},
		{"azure, Local", timing.Azure, corev1.ServiceExternalTrafficPolicyLocal, nil, true, "node-backed, Local"},
		{"aws in-tree NLB, Local", timing.AWS, corev1.ServiceExternalTrafficPolicyLocal, nlb, true, "node-backed, Local"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.spec().ReadinessGates = nil
			f.cfg.Provider = tc.provider
			f.svc.Spec.ExternalTrafficPolicy = tc.etp
			f.svc.Annotations = tc.ann
			rep := f.analyze()
			for _, id := range []string{"ZD103", "ZD104"} {
				fd, ok := find(rep, id)
				if ok != tc.fires {
					t.Fatalf("%s fires = %v, want %v; findings:\n%s", id, ok, tc.fires, dump(rep.Findings))
				}
				if ok && id == "ZD103" && !strings.Contains(fd.Message, tc.contains) {
					t.Errorf("ZD103 message %q does not name the path %q", fd.Message, tc.contains)
				}
			}
		})
	}
}

// TestZD301SeverityFromResolvedValues: maxUnavailable is resolved against
// the replicas (an HPA's maxReplicas when one scales the workload). A value
// that resolves to 0 is no finding; one that can stop the only serving pod
// is an error; anything else a warning.
func TestZD301SeverityFromResolvedValues(t *testing.T) {
	defaultStrategy := func(f *fixture) { f.dep.Spec.Strategy = appsv1.DeploymentStrategy{} }
	replicas := func(n int32) func(f *fixture) { return func(f *fixture) { f.dep.Spec.Replicas = ptr.To(n) } }
	tests := []struct {
		name     string
		mutate   func(f *fixture)
		severity rules.Severity // "" = no finding
		contains string
	}{
		{"default 25% of 3 replicas is 0", defaultStrategy, "", ""},
		{"default 25% of 1 replica is 0", all(defaultStrategy, replicas(1)), "", ""},
		{"25% of 3 is 0", maxUnavailable(intstr.FromString("25%")), "", ""},
		{"default 25% of 4 is 1", all(defaultStrategy, replicas(4)), rules.Warning, "1 of 4"},
		{"maxUnavailable 1 of 3", maxUnavailable(intstr.FromInt32(1)), rules.Warning, ""},
		{"maxUnavailable 1 of 1 stops the only pod", all(maxUnavailable(intstr.FromInt32(1)), replicas(1)), rules.Error, "only"},
		{"maxUnavailable 100% stops every pod", maxUnavailable(intstr.FromString("100%")), rules.Error, ""},
		{"HPA up to 10 replicas: 25% resolves to 2 there", all(defaultStrategy, hpa(ptr.To[int32](2))), rules.Warning, "maxReplicas 10"},
		{"DaemonSet default 1", asDaemonSet(appsv1.DaemonSetUpdateStrategy{}), rules.Warning, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.mutate(f)
			rep := f.analyze()
			fd, ok := find(rep, "ZD301")
			if ok != (tc.severity != "") {
				t.Fatalf("ZD301 fires = %v, want severity %q; findings:\n%s", ok, tc.severity, dump(rep.Findings))
			}
			if !ok {
				return
			}
			if fd.Severity != tc.severity {
				t.Errorf("severity %s, want %s: %s", fd.Severity, tc.severity, fd.Message)
			}
			if !strings.Contains(fd.Message, tc.contains) {
				t.Errorf("message %q does not contain %q", fd.Message, tc.contains)
			}
		})
	}
}

// TestZD402NumericPortOnContainerWithoutPorts: a numeric targetPort reaches
// the pod whether or not a container declares it; when no container declares
// any port there is nothing to compare against, so no finding.
func TestZD402NumericPortOnContainerWithoutPorts(t *testing.T) {
	runRule(t, "ZD402", []ruleCase{
		{name: "numeric targetPort, no ports declared", fires: false, mutate: func(f *fixture) {
			f.svc.Spec.Ports = []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}
			f.container().Ports = nil
			f.container().ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
			f.container().LivenessProbe.HTTPGet.Port = intstr.FromInt32(8080)
		}},
		{name: "named targetPort, no ports declared", fires: true, mutate: func(f *fixture) {
			f.container().Ports = nil
		}},
	})
}
