package rules_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// fixture is a Deployment behind a LoadBalancer Service, configured so that
// no rule fires under the generic provider (registration and deregistration
// 35 s). Each test case breaks one thing.
type fixture struct {
	dep   *appsv1.Deployment
	svc   *corev1.Service
	pdb   *policyv1.PodDisruptionBudget
	extra []manifest.Object
	cfg   rules.Config
	// cluster marks the Deployment as read from a cluster.
	cluster bool
}

func newFixture() *fixture {
	labels := map[string]string{"app": "web"}
	return &fixture{
		cfg: rules.Config{Provider: timing.Generic, Overrides: timing.NoOverrides},
		dep: &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: appsv1.DeploymentSpec{
				Replicas:        ptr.To[int32](3),
				MinReadySeconds: 0,
				Strategy: appsv1.DeploymentStrategy{
					Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{
						MaxUnavailable: ptr.To(intstr.FromInt32(0)),
						MaxSurge:       ptr.To(intstr.FromInt32(1)),
					},
				},
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](60),
						ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: rules.ZerodropGate}},
						Containers: []corev1.Container{{
							Name:  "app",
							Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
								PeriodSeconds:    10,
								FailureThreshold: 3,
							},
							LivenessProbe: &corev1.Probe{
								ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("http")}},
							},
							Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 40}}},
						}},
					},
				},
			},
		},
		svc: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeLoadBalancer,
				Selector: labels,
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
			},
		},
		pdb: &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: labels},
			},
		},
	}
}

// container returns the fixture's serving container.
func (f *fixture) container() *corev1.Container { return &f.dep.Spec.Template.Spec.Containers[0] }

func (f *fixture) spec() *corev1.PodSpec { return &f.dep.Spec.Template.Spec }

func (f *fixture) objects() []manifest.Object {
	objs := []manifest.Object{
		{Source: manifest.Source{File: "app.yaml", Line: 1, Cluster: f.cluster}, Kind: manifest.KindDeployment, Obj: f.dep},
	}
	if f.svc != nil {
		objs = append(objs, manifest.Object{Source: manifest.Source{File: "app.yaml", Line: 40}, Kind: manifest.KindService, Obj: f.svc})
	}
	if f.pdb != nil {
		objs = append(objs, manifest.Object{Source: manifest.Source{File: "app.yaml", Line: 60}, Kind: manifest.KindPDB, Obj: f.pdb})
	}
	return append(objs, f.extra...)
}

func (f *fixture) analyze() rules.Report { return rules.Analyze(f.objects(), f.cfg) }

// ruleCase is one table row: mutate the fixture, then expect the rule to
// fire (or not).
type ruleCase struct {
	name   string
	mutate func(f *fixture)
	fires  bool
	// contains, when set, must appear in the finding's message.
	contains string
}

// runRule runs a table for one rule ID.
func runRule(t *testing.T, id string, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			if tc.mutate != nil {
				tc.mutate(f)
			}
			rep := f.analyze()
			i := slices.IndexFunc(rep.Findings, func(fd rules.Finding) bool { return fd.Rule == id && !fd.Suppressed })
			if got := i >= 0; got != tc.fires {
				t.Fatalf("%s fires = %v, want %v; findings:\n%s", id, got, tc.fires, dump(rep.Findings))
			}
			if i < 0 {
				return
			}
			fd := rep.Findings[i]
			r, _ := rules.ByID(id)
			if fd.Severity != r.Severity {
				t.Errorf("severity %s, want %s", fd.Severity, r.Severity)
			}
			if fd.Message == "" || fd.Fix == "" {
				t.Errorf("finding without message or fix: %+v", fd)
			}
			if tc.contains != "" && !strings.Contains(fd.Message, tc.contains) {
				t.Errorf("message %q does not contain %q", fd.Message, tc.contains)
			}
		})
	}
}

func dump(fs []rules.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("  " + f.Rule + " " + f.Object + " " + f.Container + ": " + f.Message + "\n")
	}
	return b.String()
}

// sleepExec sets an exec preStop hook.
func sleepExec(cmd ...string) func(f *fixture) {
	return func(f *fixture) {
		f.container().Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}}
	}
}

func sleepAction(s int64) func(f *fixture) {
	return func(f *fixture) {
		f.container().Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}
	}
}

func httpHook(path string) func(f *fixture) {
	return func(f *fixture) {
		f.container().Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(9090)}}}
	}
}

// namespaceObj adds a Namespace object with labels.
func namespaceObj(name string, labels map[string]string) manifest.Object {
	return manifest.Object{Source: manifest.Source{File: "ns.yaml", Line: 1}, Kind: manifest.KindNamespace,
		Obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}}
}

// all chains mutations.
func all(ms ...func(f *fixture)) func(f *fixture) {
	return func(f *fixture) {
		for _, m := range ms {
			m(f)
		}
	}
}
