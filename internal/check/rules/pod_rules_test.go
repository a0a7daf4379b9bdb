package rules_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

func TestFixtureIsClean(t *testing.T) {
	rep := newFixture().analyze()
	if len(rep.Findings) != 0 {
		t.Fatalf("the baseline fixture has findings:\n%s", dump(rep.Findings))
	}
	if rep.Workloads != 1 || rep.Services != 1 {
		t.Fatalf("workloads %d, services %d, want 1 and 1", rep.Workloads, rep.Services)
	}
}

func TestZD101(t *testing.T) {
	runRule(t, "ZD101", []ruleCase{
		{name: "no readinessProbe", mutate: func(f *fixture) { f.container().ReadinessProbe = nil }, fires: true},
		{name: "readinessProbe set", fires: false},
		{name: "non-serving sidecar without probe", fires: false, mutate: func(f *fixture) {
			f.spec().Containers = append(f.spec().Containers, corev1.Container{Name: "log-shipper"})
		}},
		{name: "serving container found by numeric targetPort", fires: true, mutate: func(f *fixture) {
			f.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
			f.container().ReadinessProbe = nil
		}},
		{name: "targetPort unset means port", fires: true, mutate: func(f *fixture) {
			f.svc.Spec.Ports[0] = corev1.ServicePort{Port: 8080}
			f.container().ReadinessProbe = nil
		}},
		{name: "no declared port falls back to every container", fires: true, mutate: func(f *fixture) {
			f.container().Ports = nil
			f.container().ReadinessProbe = nil
		}},
		{name: "workload not selected by a LoadBalancer Service", fires: false, mutate: func(f *fixture) {
			f.svc.Spec.Type = corev1.ServiceTypeClusterIP
			f.container().ReadinessProbe = nil
		}},
		{name: "Service in another namespace", fires: false, mutate: func(f *fixture) {
			f.svc.Namespace = "other"
			f.container().ReadinessProbe = nil
		}},
		{name: "Service without selector", fires: false, mutate: func(f *fixture) {
			f.svc.Spec.Selector = nil
			f.container().ReadinessProbe = nil
		}},
		{name: "unset namespaces are both default", fires: true, mutate: func(f *fixture) {
			f.svc.Namespace = ""
			f.dep.Namespace = "default"
			f.container().ReadinessProbe = nil
		}},
		{name: "selector not a subset of the pod labels", fires: false, mutate: func(f *fixture) {
			f.svc.Spec.Selector = map[string]string{"app": "web", "track": "canary"}
			f.container().ReadinessProbe = nil
		}},
	})
}

func TestZD102(t *testing.T) {
	same := func(f *fixture) { f.container().LivenessProbe = f.container().ReadinessProbe.DeepCopy() }
	runRule(t, "ZD102", []ruleCase{
		{name: "identical probes", mutate: same, fires: true},
		{name: "equal after defaults", fires: true, mutate: func(f *fixture) {
			f.container().ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}}
			f.container().LivenessProbe = &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Scheme: corev1.URISchemeHTTP, Port: intstr.FromString("http")}},
				PeriodSeconds: 10, FailureThreshold: 3, TimeoutSeconds: 1, SuccessThreshold: 1,
			}
		}},
		{name: "same endpoint, higher liveness failureThreshold", fires: false, mutate: func(f *fixture) {
			same(f)
			f.container().LivenessProbe.FailureThreshold = 6
		}},
		{name: "distinct endpoints", fires: false},
		{name: "no livenessProbe", fires: false, mutate: func(f *fixture) { f.container().LivenessProbe = nil }},
	})
}

// noGate removes the readiness gate behind a Service with
// externalTrafficPolicy Local, where the load balancer registers nodes by
// their local endpoints (with Cluster there is no registration to gate).
func noGate(f *fixture) {
	f.spec().ReadinessGates = nil
	f.svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

// awsIPTargets makes the Service an AWS NLB whose target group holds pod IPs.
func awsIPTargets(f *fixture) {
	f.cfg.Provider = timing.AWS
	f.svc.Annotations = map[string]string{timing.AWSNLBTargetType: "ip"}
}

func TestZD103(t *testing.T) {
	gate := func(g string) func(f *fixture) {
		return func(f *fixture) {
			f.spec().ReadinessGates = []corev1.PodReadinessGate{{ConditionType: corev1.PodConditionType(g)}}
		}
	}
	runRule(t, "ZD103", []ruleCase{
		{name: "no gate", mutate: noGate, fires: true},
		{name: "zerodrop gate", mutate: gate(rules.ZerodropGate), fires: false},
		{name: "AWS target health gate", mutate: gate("target-health.elbv2.k8s.aws/k8s-shop-web-0123456789"), fires: false},
		{name: "GKE NEG gate", mutate: gate(rules.GKENEGGate), fires: false},
		{name: "unrelated gate", mutate: all(noGate, gate("example.com/feature-ready")), fires: true},
		{name: "zerodrop injection label on the namespace", fires: false, mutate: all(noGate, func(f *fixture) {
			f.extra = append(f.extra, namespaceObj("shop", map[string]string{rules.InjectLabel: "enabled"}))
		})},
		{name: "AWS injection label on the namespace", fires: false, mutate: all(noGate, func(f *fixture) {
			f.extra = append(f.extra, namespaceObj("shop", map[string]string{"elbv2.k8s.aws/pod-readiness-gate-inject": "enabled"}))
		})},
		{name: "injection label on another namespace", fires: true, mutate: all(noGate, func(f *fixture) {
			f.extra = append(f.extra, namespaceObj("other", map[string]string{rules.InjectLabel: "enabled"}))
		})},
		{name: "GKE NEG annotation on the Service", fires: false, mutate: all(noGate, func(f *fixture) {
			f.svc.Annotations = map[string]string{"cloud.google.com/neg": `{"exposed_ports":{"80":{}}}`}
		})},
	})
}

func TestZD104(t *testing.T) {
	minReady := func(s int32) func(f *fixture) { return func(f *fixture) { f.dep.Spec.MinReadySeconds = s } }
	runRule(t, "ZD104", []ruleCase{
		{name: "no gate, minReadySeconds unset", mutate: noGate, fires: true, contains: "minReadySeconds 0"},
		{name: "no gate, minReadySeconds below generic registration 35 s", mutate: all(noGate, minReady(34)), fires: true},
		{name: "no gate, minReadySeconds equal to registration", mutate: all(noGate, minReady(35)), fires: false},
		{name: "gate present", mutate: minReady(0), fires: false},
		{name: "azure registration 15 s", fires: false, mutate: all(noGate, minReady(15), func(f *fixture) { f.cfg.Provider = timing.Azure })},
		{name: "azure annotation raises registration", fires: true, mutate: all(noGate, minReady(15), func(f *fixture) {
			f.cfg.Provider = timing.Azure
			f.svc.Annotations = map[string]string{timing.AzureNumOfProbe: "3"}
		})},
		{name: "--registration-seconds override", fires: false, mutate: all(noGate, minReady(12), func(f *fixture) { f.cfg.Overrides.Registration = 10 })},
	})
}

func TestZD201(t *testing.T) {
	runRule(t, "ZD201", []ruleCase{
		{name: "no lifecycle", mutate: func(f *fixture) { f.container().Lifecycle = nil }, fires: true, contains: "no preStop delay"},
		{name: "postStart only", mutate: func(f *fixture) {
			f.container().Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 40}}}
		}, fires: true},
		{name: "sleep action", mutate: sleepAction(40), fires: false},
		{name: "exec sleep", mutate: sleepExec("sleep", "40"), fires: false},
		{name: "exec /bin/sleep", mutate: sleepExec("/bin/sleep", "40"), fires: false},
		{name: "sh -c sleep", mutate: sleepExec("sh", "-c", "sleep 40"), fires: false},
		{name: "zerodrop drain hook", mutate: httpHook("/drain"), fires: false},
		{name: "other httpGet hook", mutate: httpHook("/shutdown"), fires: true, contains: "not a recognised delay"},
		{name: "unknown exec hook", mutate: sleepExec("/wait-shutdown"), fires: true, contains: "/wait-shutdown"},
		{name: "sleep of a variable", mutate: sleepExec("sh", "-c", "sleep $DELAY"), fires: true},
		{name: "sleep in the background", mutate: sleepExec("sh", "-c", "sleep 40 &"), fires: true},
		{name: "hook injected by the namespace label", fires: false, mutate: func(f *fixture) {
			f.container().Lifecycle = nil
			f.extra = append(f.extra, namespaceObj("shop", map[string]string{rules.InjectLabel: "enabled"}))
		}},
		{name: "suppressed on the workload", fires: false, mutate: func(f *fixture) {
			f.container().Lifecycle = nil
			f.dep.Annotations = map[string]string{rules.IgnoreAnnotation: "ZD301, zd201: drained by a sidecar"}
		}},
		{name: "suppressed on the Service", fires: false, mutate: func(f *fixture) {
			f.container().Lifecycle = nil
			f.svc.Annotations = map[string]string{rules.IgnoreAnnotation: "ZD201: drained by a sidecar"}
		}},
		{name: "suppression without a reason", fires: true, mutate: func(f *fixture) {
			f.container().Lifecycle = nil
			f.dep.Annotations = map[string]string{rules.IgnoreAnnotation: "ZD201"}
		}},
		{name: "another rule suppressed", fires: true, mutate: func(f *fixture) {
			f.container().Lifecycle = nil
			f.dep.Annotations = map[string]string{rules.IgnoreAnnotation: "ZD202: not this one"}
		}},
	})
}

func TestZD202(t *testing.T) {
	runRule(t, "ZD202", []ruleCase{
		{name: "sleep action shorter", mutate: sleepAction(20), fires: true, contains: "20 s"},
		{name: "sleep action equal", mutate: sleepAction(35), fires: false},
		{name: "exec sleep shorter", mutate: sleepExec("sleep", "5"), fires: true},
		{name: "exec sleep with unit", mutate: sleepExec("sleep", "1m"), fires: false},
		{name: "exec sleep with seconds suffix shorter", mutate: sleepExec("/usr/bin/sleep", "30s"), fires: true},
		{name: "sh -c sleep && quit shorter", mutate: sleepExec("/bin/sh", "-c", "sleep 10 && nginx -s quit"), fires: true, contains: "10 s"},
		{name: "sh -c sleeps summed", mutate: sleepExec("sh", "-ec", "sleep 20; sleep 20"), fires: false},
		{name: "sleep after || does not count", mutate: sleepExec("sh", "-c", "sleep 10 || sleep 30"), fires: true},
		{name: "a drain loop's sleeps are no fixed delay", mutate: sleepExec("sh", "-c", "while [ -e /tmp/busy ]; do\n  sleep 1\ndone"), fires: false},
		{name: "drain hook waits for deregistration", mutate: httpHook("/drain"), fires: false},
		{name: "no hook is ZD201, not ZD202", mutate: func(f *fixture) { f.container().Lifecycle = nil }, fires: false},
		{name: "azure deregistration 15 s", mutate: all(sleepAction(15), func(f *fixture) { f.cfg.Provider = timing.Azure }), fires: false},
		{name: "haproxy deregistration 11 s", mutate: all(sleepAction(10), func(f *fixture) { f.cfg.Provider = timing.HAProxy }), fires: true},
		{name: "aws IP targets: default deregistration delay 300 s", mutate: all(sleepAction(40), awsIPTargets), fires: true, contains: "305 s"},
		{name: "aws instance targets: no deregistration delay", mutate: all(sleepAction(40), func(f *fixture) { f.cfg.Provider = timing.AWS }), fires: false},
		{name: "aws deregistration delay annotation", fires: false, mutate: all(sleepAction(35), func(f *fixture) {
			f.cfg.Provider = timing.AWS
			f.svc.Annotations = map[string]string{timing.AWSNLBTargetType: "ip", timing.AWSTargetGroupAttrs: "preserve_client_ip.enabled=true,deregistration_delay.timeout_seconds=30"}
		})},
		{name: "aws annotations ignored for another provider", fires: true, mutate: all(sleepAction(20), func(f *fixture) {
			f.svc.Annotations = map[string]string{timing.AWSTargetGroupAttrs: "deregistration_delay.timeout_seconds=5"}
		})},
		{name: "--deregistration-seconds override", mutate: all(sleepAction(15), func(f *fixture) { f.cfg.Overrides.Deregistration = 10 }), fires: false},
	})
}

func TestZD203(t *testing.T) {
	grace := func(g int64) func(f *fixture) {
		return func(f *fixture) { f.spec().TerminationGracePeriodSeconds = ptr.To(g) }
	}
	runRule(t, "ZD203", []ruleCase{
		{name: "default grace 30 below sleep 40", mutate: func(f *fixture) { f.spec().TerminationGracePeriodSeconds = nil }, fires: true, contains: "default 30"},
		{name: "grace above sleep", mutate: grace(60), fires: false},
		{name: "grace equal to sleep", mutate: grace(40), fires: true},
		{name: "exec sleep above grace", mutate: all(grace(45), sleepExec("sleep", "50")), fires: true},
		{name: "sleep infinity", mutate: sleepExec("sleep", "infinity"), fires: true, contains: "infinity"},
		{name: "drain hook waits AWS's 305 s", mutate: all(httpHook("/drain"), awsIPTargets), fires: true},
		{name: "drain hook with azure", mutate: all(httpHook("/drain"), func(f *fixture) { f.cfg.Provider = timing.Azure }), fires: false},
		{name: "unknown hook", mutate: all(grace(1), sleepExec("/wait-shutdown")), fires: false},
	})
}

func TestZD204(t *testing.T) {
	local := func(f *fixture) { f.svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }
	grace := func(g int64) func(f *fixture) {
		return func(f *fixture) { f.spec().TerminationGracePeriodSeconds = ptr.To(g) }
	}
	// Generic deregistration: 35 s; the fixture's preStop sleep is 40 s.
	runRule(t, "ZD204", []ruleCase{
		{name: "preStop past deregistration", mutate: all(local, grace(90)), fires: false},
		// sleep 10 + 10 × (3 − 1) = 30 < 35
		{name: "stops serving before deregistration", mutate: all(local, grace(60), sleepAction(10)), fires: true, contains: "30 s after termination starts, 5 s before the load balancer's deregistration time of 35 s"},
		{name: "probe defaults", mutate: all(local, grace(60), sleepAction(10), func(f *fixture) {
			f.container().ReadinessProbe.PeriodSeconds, f.container().ReadinessProbe.FailureThreshold = 0, 0
		}), fires: true},
		{name: "longer failureThreshold covers it", mutate: all(local, grace(60), sleepAction(10), func(f *fixture) { f.container().ReadinessProbe.FailureThreshold = 4 }), fires: false},
		{name: "serving long before the grace period ends is no finding", mutate: all(local, grace(300), sleepAction(20)), fires: false},
		{name: "no preStop: 0 + 20 < 30, the grace period", mutate: all(local, grace(30), func(f *fixture) { f.container().Lifecycle = nil }), fires: true, contains: "before the end of the grace period (terminationGracePeriodSeconds 30, before the deregistration time of 35 s)"},
		{name: "no preStop, grace period shorter than the readiness tolerance", mutate: all(local, grace(15), func(f *fixture) { f.container().Lifecycle = nil }), fires: false},
		{name: "externalTrafficPolicy Cluster", mutate: all(grace(60), sleepAction(10)), fires: false},
		{name: "no readinessProbe", mutate: all(local, grace(60), sleepAction(10), func(f *fixture) { f.container().ReadinessProbe = nil }), fires: false},
		{name: "unknown hook", mutate: all(local, grace(90), sleepExec("/wait-shutdown")), fires: false},
	})
}
