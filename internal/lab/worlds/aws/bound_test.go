package aws

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// healthCheck is a target group's health check as a test writes it.
type healthCheck struct {
	port                 int32
	interval, healthy, u int32
}

// emulatedNLBs is an emulator served on HTTPS and a function making a
// network load balancer in it, as the CCM does: one listener per check's
// port, each forwarding to a target group of its own with the check's
// interval and thresholds; it returns the load balancer's DNS name.
func emulatedNLBs(t *testing.T) (*awsapi.Emulator, *awsapi.Served, func(name string, checks ...healthCheck) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	emu := awsapi.New(awsapi.Options{})
	emu.AddSubnet(awsapi.Subnet{ID: "subnet-a", VPCID: "vpc-1", AZ: "us-east-1a", CIDR: "10.0.0.0/24"})
	served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	hc, err := served.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	c := elbv2.NewFromConfig(aws.Config{Region: awsapi.DefaultRegion, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: awsapi.AccessKeyID, SecretAccessKey: awsapi.SecretAccessKey}, nil
		})}, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(served.URL) })
	return emu, served, func(name string, checks ...healthCheck) string {
		t.Helper()
		lb, err := c.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{Name: aws.String(name), Type: elbtypes.LoadBalancerTypeEnumNetwork,
			Subnets: []string{"subnet-a"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range checks {
			tg, err := c.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{Name: aws.String(fmt.Sprintf("%s-%d", name, ch.port)),
				Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(30000 + ch.port), VpcId: aws.String("vpc-1"),
				HealthCheckProtocol: elbtypes.ProtocolEnumHttp, HealthCheckPath: aws.String("/healthz"), HealthCheckPort: aws.String("32000"),
				HealthCheckIntervalSeconds: aws.Int32(ch.interval), HealthyThresholdCount: aws.Int32(ch.healthy), UnhealthyThresholdCount: aws.Int32(ch.u)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.CreateListener(ctx, &elbv2.CreateListenerInput{LoadBalancerArn: lb.LoadBalancers[0].LoadBalancerArn,
				Port: aws.Int32(ch.port), Protocol: elbtypes.ProtocolEnumTcp,
				DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: tg.TargetGroups[0].TargetGroupArn}}}); err != nil {
				t.Fatal(err)
			}
		}
		return aws.ToString(lb.LoadBalancers[0].DNSName)
	}
}

// TestWorkloadCheck: the bound's interval and thresholds are the target
// group's as written to the emulator (here: not the CCM's defaults), of
// the listener on the workload's port of the workload's NLB, not of
// another listener or load balancer; a load balancer or port the emulator
// does not have is an error.
func TestWorkloadCheck(t *testing.T) {
	emu, _, nlb := emulatedNLBs(t)
	workload := nlb("aworkload", healthCheck{port: 80, interval: 7, healthy: 3, u: 4}, healthCheck{port: 443, interval: 30, healthy: 5, u: 2})
	other := nlb("aother", healthCheck{port: 80, interval: 10, healthy: 2, u: 2})

	got, err := workloadCheck(emu.Snapshot(), workload, 80)
	if err != nil {
		t.Fatal(err)
	}
	if got.Interval != 7*time.Second || got.HealthyThreshold != 3 || got.UnhealthyThreshold != 4 {
		t.Errorf("the workload's port 80: %+v, want interval 7s, thresholds 3 healthy and 4 unhealthy", got)
	}
	if got, err := workloadCheck(emu.Snapshot(), other, 80); err != nil || got.Interval != 10*time.Second {
		t.Errorf("the other NLB's port 80: %+v, %v: want its own 10s", got, err)
	}
	if _, err := workloadCheck(emu.Snapshot(), workload, 8080); err == nil {
		t.Error("a port without a listener: want an error")
	}
	if _, err := workloadCheck(emu.Snapshot(), "anone.elb.us-east-1.amazonaws.com", 80); err == nil {
		t.Error("a load balancer the emulator does not have: want an error")
	}
}

// TestGraceOf: the grace period is the one Deployment's whose pods the
// Service selects; none or two selected is an error.
func TestGraceOf(t *testing.T) {
	dep := func(name, app string, grace int64) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app, "pod-template-hash": "x"}},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(grace)}}}}
	}
	deps := []appsv1.Deployment{dep("client", "client", 30), dep("web", "web", 60)}
	if g, err := graceOf(deps, map[string]string{"app": "web"}); err != nil || g != 60*time.Second {
		t.Errorf("grace %s, %v: want web's 60s", g, err)
	}
	if _, err := graceOf(deps, map[string]string{"app": "api"}); err == nil {
		t.Error("no Deployment selected: want an error")
	}
	if _, err := graceOf(append(deps, dep("web-2", "web", 90)), map[string]string{"app": "web"}); err == nil {
		t.Error("two Deployments selected: want an error")
	}
	if _, err := graceOf(deps, nil); err == nil {
		t.Error("a Service without a selector: want an error")
	}
}

// TestGatesBound: a gates run's bound is computed at the clocks where the
// run set them: the workload's target group in the emulator (Local: 7 s,
// 4 unhealthy), the propagation zerodrop's controller was given (the
// world's assumed 5 s) and its default health-answer age (5 s), and the
// Deployment's grace period. 1 + 4·7 + 5 + 0 + 5 = 39 s: held with 60 s,
// not with 40 s (B = 5 s), and not when the emulator's data plane lags
// more than the 5 s the gate assumes (held when it lags less).
func TestGatesBound(t *testing.T) {
	emu, served, nlb := emulatedNLBs(t)
	dns := nlb("aworkload", healthCheck{port: 80, interval: 7, healthy: 3, u: 4})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "lab-1", Name: "web"},
		Spec:   corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{Hostname: dns}}}}}
	for _, tc := range []struct {
		grace int64
		lag   time.Duration
		holds bool
	}{{60, 5 * time.Second, true}, {40, 5 * time.Second, false}, {60, 20 * time.Second, false}, {60, 0, true}} {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab-1", Name: "web"}, Spec: appsv1.DeploymentSpec{
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(tc.grace)}}}}
		a := &run{w: New(Options{Propagation: tc.lag, AssumedPropagation: 5 * time.Second}), emu: emu, served: served, listener: "10.0.0.5:80",
			svc: types.NamespacedName{Namespace: "lab-1", Name: "web"},
			env: world.Env{Mode: report.ModeGates, Class: "zerodrop.dev/lab-1", Net: &cluster.Network{Kubeconfig: "/lab/kubeconfig"},
				CP: &cluster.ControlPlane{Client: fake.NewClientset(dep)}}}
		b, err := a.gatesBound(context.Background(), svc)
		if err != nil {
			t.Fatal(err)
		}
		want := report.AWSClock{Policy: "Local", HealthCheckIntervalSeconds: 7, UnhealthyThreshold: 4, HealthyThreshold: 3,
			HealthMaxAgeSeconds: 5, PropagationSeconds: 5, KubeProxyMarginSeconds: 2, GraceSeconds: float64(tc.grace)}
		if b.AWSClock != want || b.BoundSeconds != 39 || b.Holds != tc.holds {
			t.Errorf("grace %ds, lag %s: %+v, bound %gs, holds %v; want %+v, 39s, %v", tc.grace, tc.lag, b.AWSClock, b.BoundSeconds, b.Holds, want, tc.holds)
		}
		if beyond := strings.Contains(b.Why, "more than the P"); beyond != (tc.lag > 5*time.Second) {
			t.Errorf("grace %ds, lag %s: why %q: want the lag beyond P named exactly when it is", tc.grace, tc.lag, b.Why)
		}
	}
}
