package rules_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// asDaemonSet replaces the Deployment by a DaemonSet with the same pods.
func asDaemonSet(strategy appsv1.DaemonSetUpdateStrategy) func(f *fixture) {
	return func(f *fixture) {
		ds := &appsv1.DaemonSet{
			ObjectMeta: f.dep.ObjectMeta,
			Spec: appsv1.DaemonSetSpec{
				Selector: f.dep.Spec.Selector, Template: f.dep.Spec.Template, UpdateStrategy: strategy,
			},
		}
		f.dep.Spec.Template.Labels = map[string]string{"unrelated": "true"} // keep the Deployment out
		f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "ds.yaml", Line: 1}, Kind: manifest.KindDaemonSet, Obj: ds})
	}
}

func asStatefulSet(f *fixture) {
	sts := &appsv1.StatefulSet{
		ObjectMeta: f.dep.ObjectMeta,
		Spec:       appsv1.StatefulSetSpec{Replicas: f.dep.Spec.Replicas, Selector: f.dep.Spec.Selector, Template: f.dep.Spec.Template},
	}
	f.dep.Spec.Template.Labels = map[string]string{"unrelated": "true"}
	f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "sts.yaml", Line: 1}, Kind: manifest.KindStatefulSet, Obj: sts})
}

func asBarePod(f *fixture) {
	pod := &corev1.Pod{ObjectMeta: f.dep.ObjectMeta, Spec: f.dep.Spec.Template.Spec}
	pod.Labels = f.dep.Spec.Template.Labels
	f.dep.Spec.Template.Labels = map[string]string{"unrelated": "true"}
	f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "pod.yaml", Line: 1}, Kind: manifest.KindPod, Obj: pod})
}

func hpa(minReplicas *int32) func(f *fixture) {
	return func(f *fixture) {
		f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "hpa.yaml", Line: 1}, Kind: manifest.KindHPA,
			Obj: &autoscalingv2.HorizontalPodAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
					ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
					MinReplicas:    minReplicas, MaxReplicas: 10,
				},
			}})
	}
}

func maxUnavailable(v intstr.IntOrString) func(f *fixture) {
	return func(f *fixture) { f.dep.Spec.Strategy.RollingUpdate.MaxUnavailable = &v }
}

func TestZD301(t *testing.T) {
	runRule(t, "ZD301", []ruleCase{
		{name: "default 25% of 4 replicas", fires: true, contains: "default 25%", mutate: func(f *fixture) {
			f.dep.Spec.Strategy = appsv1.DeploymentStrategy{}
			f.dep.Spec.Replicas = ptr.To[int32](4)
		}},
		{name: "default 25% at replicas 3 is 0 pods", fires: false, mutate: func(f *fixture) { f.dep.Spec.Strategy = appsv1.DeploymentStrategy{} }},
		{name: "RollingUpdate without rollingUpdate block", fires: true, mutate: func(f *fixture) {
			f.dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
			f.dep.Spec.Replicas = ptr.To[int32](8)
		}},
		{name: "maxUnavailable 0", fires: false},
		{name: "maxUnavailable 0%", mutate: maxUnavailable(intstr.FromString("0%")), fires: false},
		{name: "maxUnavailable 1", mutate: maxUnavailable(intstr.FromInt32(1)), fires: true},
		{name: "maxUnavailable 50%", mutate: maxUnavailable(intstr.FromString("50%")), fires: true, contains: "1 of 3"},
		{name: "Recreate is ZD302", mutate: func(f *fixture) {
			f.dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, fires: false},
		{name: "DaemonSet default maxUnavailable 1", mutate: asDaemonSet(appsv1.DaemonSetUpdateStrategy{}), fires: true, contains: "default 1"},
		{name: "DaemonSet surge", fires: false, mutate: asDaemonSet(appsv1.DaemonSetUpdateStrategy{
			Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			},
		})},
		{name: "DaemonSet OnDelete", mutate: asDaemonSet(appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}), fires: false},
		{name: "StatefulSet cannot surge", mutate: asStatefulSet, fires: false},
	})
}

func TestZD302(t *testing.T) {
	runRule(t, "ZD302", []ruleCase{
		{name: "Recreate", mutate: func(f *fixture) {
			f.dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, fires: true},
		{name: "RollingUpdate", fires: false},
		{name: "unset defaults to RollingUpdate", mutate: func(f *fixture) { f.dep.Spec.Strategy = appsv1.DeploymentStrategy{} }, fires: false},
	})
}

func TestZD303(t *testing.T) {
	replicas := func(r *int32) func(f *fixture) { return func(f *fixture) { f.dep.Spec.Replicas = r } }
	runRule(t, "ZD303", []ruleCase{
		{name: "replicas unset counts as 1", mutate: replicas(nil), fires: true, contains: "default 1"},
		{name: "replicas 1", mutate: replicas(ptr.To[int32](1)), fires: true},
		{name: "replicas 0", mutate: replicas(ptr.To[int32](0)), fires: true},
		{name: "replicas 2", mutate: replicas(ptr.To[int32](2)), fires: false},
		{name: "HPA minReplicas 1 wins over replicas 3", mutate: hpa(ptr.To[int32](1)), fires: true, contains: "HorizontalPodAutoscaler web"},
		{name: "HPA minReplicas unset is 1", mutate: hpa(nil), fires: true},
		{name: "HPA minReplicas 2, replicas unset", mutate: all(replicas(nil), hpa(ptr.To[int32](2))), fires: false},
		{name: "bare Pod", mutate: asBarePod, fires: true},
		{name: "DaemonSet has no replicas", mutate: asDaemonSet(appsv1.DaemonSetUpdateStrategy{}), fires: false},
		{name: "StatefulSet replicas 1", mutate: all(replicas(ptr.To[int32](1)), asStatefulSet), fires: true},
	})
}

func TestZD304(t *testing.T) {
	budget := func(minAvail, maxUnavail *intstr.IntOrString) func(f *fixture) {
		return func(f *fixture) { f.pdb.Spec.MinAvailable, f.pdb.Spec.MaxUnavailable = minAvail, maxUnavail }
	}
	runRule(t, "ZD304", []ruleCase{
		{name: "no PDB", mutate: func(f *fixture) { f.pdb = nil }, fires: true, contains: "no PodDisruptionBudget"},
		{name: "maxUnavailable 1", fires: false},
		{name: "minAvailable 0", mutate: budget(ptr.To(intstr.FromInt32(0)), nil), fires: true, contains: "allows all 3"},
		{name: "minAvailable 0%", mutate: budget(ptr.To(intstr.FromString("0%")), nil), fires: true},
		{name: "minAvailable 2 of 3", mutate: budget(ptr.To(intstr.FromInt32(2)), nil), fires: false},
		{name: "minAvailable 50% rounds up", mutate: budget(ptr.To(intstr.FromString("50%")), nil), fires: false},
		{name: "maxUnavailable 100%", mutate: budget(nil, ptr.To(intstr.FromString("100%"))), fires: true},
		{name: "maxUnavailable 3 of 3", mutate: budget(nil, ptr.To(intstr.FromInt32(3))), fires: true},
		{name: "neither field set", mutate: budget(nil, nil), fires: true},
		{name: "PDB in another namespace", mutate: func(f *fixture) { f.pdb.Namespace = "other" }, fires: true},
		{name: "PDB selecting other pods", mutate: func(f *fixture) { f.pdb.Spec.Selector.MatchLabels = map[string]string{"app": "api"} }, fires: true},
		{name: "PDB with an empty selector selects every pod", mutate: func(f *fixture) { f.pdb.Spec.Selector = &metav1.LabelSelector{} }, fires: false},
		{name: "PDB with a nil selector selects nothing", mutate: func(f *fixture) { f.pdb.Spec.Selector = nil }, fires: true},
		{name: "DaemonSet pods are skipped by drains", mutate: all(func(f *fixture) { f.pdb = nil }, asDaemonSet(appsv1.DaemonSetUpdateStrategy{})), fires: false},
		{name: "replicas 1 and maxUnavailable 1", mutate: func(f *fixture) { f.dep.Spec.Replicas = ptr.To[int32](1) }, fires: true, contains: "an eviction does not surge"},
		{name: "replicas 1 and maxUnavailable 0 keeps the only pod", mutate: all(func(f *fixture) { f.dep.Spec.Replicas = ptr.To[int32](1) }, budget(nil, ptr.To(intstr.FromInt32(0)))), fires: false},
		{name: "replicas 1 and no PDB", mutate: func(f *fixture) { f.dep.Spec.Replicas = ptr.To[int32](1); f.pdb = nil }, fires: true, contains: "only created once the pod is terminating"},
	})
}

func TestZD401(t *testing.T) {
	local := func(f *fixture) { f.svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }
	anti := func(key string, sel map[string]string) func(f *fixture) {
		return func(f *fixture) {
			f.spec().Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
					},
				}},
			}}
		}
	}
	runRule(t, "ZD401", []ruleCase{
		{name: "Local without spreading", mutate: local, fires: true, contains: "shop/web"},
		{name: "Cluster", fires: false},
		{name: "topology spread on hostname", fires: false, mutate: all(local, func(f *fixture) {
			f.spec().TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			}}
		})},
		{name: "topology spread on zone only", fires: true, mutate: all(local, func(f *fixture) {
			f.spec().TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			}}
		})},
		{name: "preferred anti-affinity on hostname", mutate: all(local, anti("kubernetes.io/hostname", map[string]string{"app": "web"})), fires: false},
		{name: "required anti-affinity on hostname", fires: false, mutate: all(local, func(f *fixture) {
			f.spec().Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}},
				}},
			}}
		})},
		{name: "anti-affinity against other pods", mutate: all(local, anti("kubernetes.io/hostname", map[string]string{"app": "db"})), fires: true},
		{name: "DaemonSet runs one pod per node", mutate: all(local, asDaemonSet(appsv1.DaemonSetUpdateStrategy{})), fires: false},
		{name: "StatefulSet", mutate: all(local, asStatefulSet), fires: true},
	})
}

func TestZD402(t *testing.T) {
	port := func(sp corev1.ServicePort) func(f *fixture) {
		return func(f *fixture) { f.svc.Spec.Ports = []corev1.ServicePort{sp} }
	}
	runRule(t, "ZD402", []ruleCase{
		{name: "named port matches", fires: false},
		{name: "named port missing", mutate: port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("web")}), fires: true, contains: `named port "web"`},
		{name: "numeric targetPort declared", mutate: port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)}), fires: false},
		{name: "numeric targetPort undeclared", mutate: port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(9000)}), fires: true, contains: "targets port 9000"},
		{name: "targetPort unset means port", mutate: port(corev1.ServicePort{Port: 8080}), fires: false},
		{name: "targetPort unset, port undeclared", mutate: port(corev1.ServicePort{Port: 80}), fires: true, contains: "targets port 80"},
		{name: "protocol must match", mutate: port(corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("http")}), fires: true},
		{name: "named port on a sidecar", fires: false, mutate: all(port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("proxy")}), func(f *fixture) {
			f.spec().InitContainers = []corev1.Container{{
				Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}},
			}}
		})},
		{name: "named port on a plain init container", fires: true, mutate: all(port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("proxy")}), func(f *fixture) {
			f.spec().InitContainers = []corev1.Container{{Name: "proxy", Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}}}
		})},
		{name: "suppressed on the Service", fires: false, mutate: all(port(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("web")}), func(f *fixture) {
			f.svc.Annotations = map[string]string{"zerodrop.dev/ignore": "ZD402: the port is served by an injected proxy"}
		})},
	})
}

func TestZD402IsReportedOnTheService(t *testing.T) {
	f := newFixture()
	f.svc.Spec.Ports[0].TargetPort = intstr.FromString("missing")
	rep := f.analyze()
	if len(rep.Findings) != 1 {
		t.Fatalf("want one finding, got:\n%s", dump(rep.Findings))
	}
	fd := rep.Findings[0]
	if fd.Object != "Service/shop/web" || fd.Source.Line != 40 || fd.Container != "" {
		t.Errorf("finding on %s line %d container %q, want Service/shop/web line 40", fd.Object, fd.Source.Line, fd.Container)
	}
}

func TestOwnedAndHookObjectsAreSkipped(t *testing.T) {
	f := newFixture()
	f.container().ReadinessProbe = nil // ZD101 on every workload that is checked
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f", Namespace: "shop", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Controller: ptr.To(true),
		}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](3), Template: f.dep.Spec.Template},
	}
	orphan := rs.DeepCopy()
	orphan.Name, orphan.OwnerReferences[0].Name = "web-orphan", "gone"
	hook := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-test", Namespace: "shop",
		Labels: f.dep.Spec.Template.Labels, Annotations: map[string]string{"helm.sh/hook": "test"}}}
	f.extra = append(f.extra,
		manifest.Object{Source: manifest.Source{File: "rs.yaml", Line: 1}, Kind: manifest.KindReplicaSet, Obj: rs},
		manifest.Object{Source: manifest.Source{File: "rs.yaml", Line: 30}, Kind: manifest.KindReplicaSet, Obj: orphan},
		manifest.Object{Source: manifest.Source{File: "hook.yaml", Line: 1}, Kind: manifest.KindPod, Obj: hook},
	)
	got := map[string]bool{}
	for _, fd := range f.analyze().Findings {
		got[fd.Object] = true
	}
	want := map[string]bool{"Deployment/shop/web": true, "ReplicaSet/shop/web-orphan": true}
	if len(got) != len(want) || !got["Deployment/shop/web"] || !got["ReplicaSet/shop/web-orphan"] {
		t.Fatalf("objects with findings %v, want %v", got, want)
	}
}

func TestSeveralServicesTakeTheSlowestTiming(t *testing.T) {
	f := newFixture()
	f.cfg.Provider = "azure"
	f.container().Lifecycle.PreStop.Sleep.Seconds = 16
	slow := f.svc.DeepCopy()
	slow.Name = "web-internal"
	slow.Annotations = map[string]string{"service.beta.kubernetes.io/azure-load-balancer-health-probe-interval": "10"}
	f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "svc.yaml", Line: 1}, Kind: manifest.KindService, Obj: slow})
	rep := f.analyze()
	// 10 s × 2 probes + 5 s = 25 s > 16 s; the fast Service alone needs 15 s.
	if len(rep.Findings) != 1 || rep.Findings[0].Rule != "ZD202" {
		t.Fatalf("want one ZD202, got:\n%s", dump(rep.Findings))
	}
}
