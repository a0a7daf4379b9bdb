package aws

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// The clocks of the gates' bound on AWS (report.AWSBoundAt), each read
// where the run set it rather than from a default: the health check of the
// workload's target group as the CCM wrote it (the emulator's state), the
// flags zerodrop's controller pods were given (parsed by the controller's
// own parser, defaults included), and the grace period of the workload's
// Deployment.

// gatesBound is the bound at the run's clocks for the workload's Service
// svc, whose NLB the CCM made.
func (a *run) gatesBound(ctx context.Context, svc *corev1.Service) (*report.AWSBound, error) {
	if len(svc.Status.LoadBalancer.Ingress) == 0 || svc.Status.LoadBalancer.Ingress[0].Hostname == "" {
		return nil, fmt.Errorf("service %s has no load balancer's DNS name", a.svc)
	}
	a.mu.Lock()
	listener := a.listener
	a.mu.Unlock()
	ap, err := netip.ParseAddrPort(listener)
	if err != nil {
		return nil, fmt.Errorf("the workload's listener %q: %w", listener, err)
	}
	hc, err := workloadCheck(a.emu.Snapshot(), svc.Status.LoadBalancer.Ingress[0].Hostname, int32(ap.Port()))
	if err != nil {
		return nil, err
	}
	cfg, err := controller.ParseArgs(a.ControllerArgs(nil)[3:]) // after lab, aws-controller, --emulator-ca
	if err != nil {
		return nil, fmt.Errorf("zerodrop's controller flags: %w", err)
	}
	deps, err := a.env.CP.Client.AppsV1().Deployments(svc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("the workload's Deployment: %w", err)
	}
	grace, err := graceOf(deps.Items, svc.Spec.Selector)
	if err != nil {
		return nil, err
	}
	b := report.AWSBoundAt(a.env.Mode, report.AWSClock{Policy: string(svc.Spec.ExternalTrafficPolicy),
		HealthCheckIntervalSeconds: hc.Interval.Seconds(), UnhealthyThreshold: hc.UnhealthyThreshold, HealthyThreshold: hc.HealthyThreshold,
		HealthMaxAgeSeconds: cfg.AWS.HealthMaxAge.Seconds(), PropagationSeconds: cfg.AWS.Propagation.Seconds(),
		KubeProxyMarginSeconds: cfg.KubeProxyMargin.Seconds(), GraceSeconds: grace.Seconds()})
	return beyondAssumption(b, a.w.opts.Propagation), nil
}

// beyondAssumption is b, not held when its Local gate assumes a shorter
// lag than the data plane's, lag: docs/aws.md, "the gate's promise ends
// where P ends" — new connections then still reach the node after its
// last pod was let go, whatever the grace period. The formula cannot see
// this (P is zerodrop's flag); the world, which sets the emulator's lag,
// can. Cluster's bound does not depend on P.
func beyondAssumption(b *report.AWSBound, lag time.Duration) *report.AWSBound {
	if b == nil || b.Policy != string(corev1.ServiceExternalTrafficPolicyLocal) {
		return b
	}
	p := time.Duration(b.PropagationSeconds * float64(time.Second))
	if lag <= p {
		return b
	}
	b.Holds = false
	b.Why += fmt.Sprintf("; but the data plane lags %s, more than the P = %s the gate assumes: the bound ends there", lag, p)
	return b
}

// workloadCheck is the health check of the target group that the listener
// on port of the load balancer named dnsName forwards to, in s.
func workloadCheck(s awsapi.Snapshot, dnsName string, port int32) (awsapi.HealthCheckView, error) {
	for _, lb := range s.LoadBalancers {
		if lb.DNSName != dnsName {
			continue
		}
		for _, l := range lb.Listeners {
			if l.Port != port {
				continue
			}
			tg, ok := s.TargetGroup(l.TargetGroupARN)
			if !ok {
				return awsapi.HealthCheckView{}, fmt.Errorf("listener %s: no target group %s", l.ARN, l.TargetGroupARN)
			}
			return tg.HealthCheck, nil
		}
		return awsapi.HealthCheckView{}, fmt.Errorf("load balancer %s: no listener on port %d", dnsName, port)
	}
	return awsapi.HealthCheckView{}, fmt.Errorf("no load balancer %s in the emulator", dnsName)
}

// graceOf is the terminationGracePeriodSeconds of the one Deployment
// whose pods selector selects.
func graceOf(deps []appsv1.Deployment, selector map[string]string) (time.Duration, error) {
	if len(selector) == 0 {
		return 0, fmt.Errorf("the Service selects no pods")
	}
	sel := labels.SelectorFromSet(selector)
	var found []appsv1.Deployment
	for _, d := range deps {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d Deployments' pods match the Service's selector %v: want one", len(found), selector)
	}
	g := found[0].Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil { // the API server defaults it; a Deployment read back has it
		return 0, fmt.Errorf("deployment %s has no terminationGracePeriodSeconds", found[0].Name)
	}
	return time.Duration(*g) * time.Second, nil
}
