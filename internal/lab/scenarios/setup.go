package scenarios

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// setup creates the namespace, HAProxy, the controllers and the workload, and
// waits until traffic flows to every replica.
func (r *run) setup(ctx context.Context, want int32) error {
	cs := r.lab.cp.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
	if r.mode.Gated() {
		ns.Labels = map[string]string{webhook.LabelInject: webhook.InjectEnabled}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	sctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	if err := r.world.Start(ctx); err != nil {
		return err
	}
	r.ctrls = newControllers(r)
	// A world may run the mode's writer itself (on emulated Azure the
	// upstream and recipe modes' CCM; the chart's install zerodrop with
	// its own drain Service), started with the load balancer.
	if !r.world.OwnsWriters() {
		if r.mode.Gated() {
			if err := r.lab.selectDrainReplicas(ctx, r.id); err != nil {
				return err
			}
		}
		if err := r.ctrls.start(ctx); err != nil {
			return err
		}
	}
	go r.ctrls.loop(sctx)
	if err := r.createService(ctx); err != nil {
		return err
	}
	if r.mode.Gated() || r.mode == report.ModeRecipe {
		if err := r.createPDB(ctx); err != nil {
			return err
		}
	}
	if w, ok := r.world.(world.AdmissionWaiter); ok {
		tmpl := r.deployment(1).Spec.Template
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: r.ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		if err := w.WaitAdmission(ctx, probe); err != nil {
			return err
		}
	}
	if _, err := cs.AppsV1().Deployments(r.ns).Create(ctx, r.deployment(want), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("deployment: %w", err)
	}
	return r.waitSteady(ctx, want, r.steadyTimeout(want))
}

// createService creates the workload's LoadBalancer Service: the run's
// class for zerodrop, none for the upstream controller (which takes every
// Service without one), and the variant's backend mode and traffic policy.
func (r *run) createService(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     ptr.To(r.class),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Selector:              map[string]string{"app": appName},
			Ports: []corev1.ServicePort{{Name: "http", Port: servicePort, TargetPort: intstr.FromString("http"),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if r.policy == PolicyLocal {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if r.backend == BackendNode {
		svc.Annotations = map[string]string{model.AnnotationBackendMode: string(model.NodeMode)}
	}
	if r.mode.NodeBacked() {
		svc.Spec.LoadBalancerClass = nil
	}
	r.world.Service(svc)
	created, err := r.lab.cp.Client.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	r.world.ServiceCreated(created)
	return nil
}

// createPDB is the recipe's PodDisruptionBudget (zerodrop check asks for
// one too): a node drain evicts one pod at a time.
func (r *run) createPDB(ctx context.Context) error {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: r.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": appName}},
		},
	}
	if _, err := r.lab.cp.Client.PolicyV1().PodDisruptionBudgets(r.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("pdb: %w", err)
	}
	return nil
}

// steadyTimeout bounds how long a workload of n replicas may take to be
// steady after a disruption: 120 s, and with the recipe each of the n pods
// replaced one at a time (minReadySeconds and a readiness probe period on
// top of a start) plus one grace period for the last old pod.
func (r *run) steadyTimeout(n int32) time.Duration {
	d := 120 * time.Second
	if r.mode == report.ModeRecipe {
		rc := r.lab.opts.Recipe
		d += time.Duration(n)*(rc.MinReady+10*time.Second) + rc.GracePeriod
	}
	if r.world != nil { // nil: a test's run, made without one
		d += r.world.SteadyTimeout(n)
	}
	return d
}

// deployment is a typical web Deployment: a readiness probe with the
// Kubernetes defaults (period 10 s, failure threshold 3) and the grace
// period of Options.GracePeriod (the default 30 s). zerodrop mode adds the rollout settings zerodrop
// check asks for (maxUnavailable 0, maxSurge 1); the webhook adds the gate and
// the hook at admission. Upstream keeps the Deployment defaults (25 %/25 %).
// The recipe adds its preStop sleep, grace period and minReadySeconds to
// zerodrop's rollout settings.
func (r *run) deployment(n int32) *appsv1.Deployment {
	labels := map[string]string{"app": appName}
	d := deploymentOf(metav1.ObjectMeta{Name: appName, Namespace: r.ns}, labels, n, corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To(int64(r.lab.gracePeriod() / time.Second)),
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "lab/web:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: podPort, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
			}},
		}},
	})
	if r.lab.opts.AppExitOnSIGTERM {
		d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: traffic.AppSigtermEnv, Value: traffic.AppSigtermExit}}
	}
	if r.mode.Gated() || r.mode == report.ModeRecipe {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}}
	}
	if r.mode == report.ModeRecipe {
		rc := r.lab.opts.Recipe
		spec := &d.Spec.Template.Spec
		spec.TerminationGracePeriodSeconds = ptr.To(int64(rc.GracePeriod / time.Second))
		spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: int64(rc.PreStopSleep / time.Second)}}}
		d.Spec.MinReadySeconds = int32(rc.MinReady / time.Second)
	}
	return d
}

// deploymentOf is a Deployment of n pods of spec, which carry labels and
// are selected by them.
func deploymentOf(meta metav1.ObjectMeta, labels map[string]string, n int32, spec corev1.PodSpec) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(n),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
	}}
}

// gracePeriod is Options.GracePeriod, or its default.
func (l *lab) gracePeriod() time.Duration {
	if l.opts.GracePeriod > 0 {
		return l.opts.GracePeriod
	}
	return DefaultGracePeriod
}
