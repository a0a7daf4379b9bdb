package azure

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Changes of the run's other Services (services.go) while the churn runs
// and while restart-idle's writer is down.
//
// churn: cloud-provider-azure #9839, where the local-service backend-pool
// updater and the reconcile loop wrote one load balancer at once (409s,
// superseded operations, Warning Events). Every churnEndpointTick a Local
// other Service's endpoints move to other nodes (with multiple load
// balancers the CCM's updater rewrites the Service's own pool; zerodrop
// drains the node left without one), and every churnServiceTick in turn a
// Service is created, one is moved to the other load balancer (the CCM's
// multiple layout; elsewhere there is one load balancer and its second
// port is added or removed instead), and a Service's second port is added
// or removed.
//
// restart-idle (Options.IdleChange endpoints-move): every Local other
// Service's endpoints move to other nodes while no writer leads, so that
// the new leader's first pass meets the change. With pool-drift one node
// leaves the NIC-based pools out of band instead (drift.go).

const (
	churnEndpointTick = 50 * time.Millisecond
	churnServiceTick  = 500 * time.Millisecond
)

// The changes restart-idle can make while the writer is down
// (Options.IdleChange).
const (
	IdleChangeNone          = "none"
	IdleChangeEndpointsMove = "endpoints-move"
	IdleChangePoolDrift     = "pool-drift"
)

// IdleChanges are the values of Options.IdleChange, the default first.
var IdleChanges = []string{IdleChangeNone, IdleChangeEndpointsMove, IdleChangePoolDrift}

var (
	_ world.Outage  = (*run)(nil)
	_ world.Churner = (*run)(nil)
)

// DuringOutage moves every Local other Service's endpoints
// (IdleChangeEndpointsMove), or takes a node out of the pools
// (IdleChangePoolDrift).
func (a *run) DuringOutage(ctx context.Context, i int) error {
	if a.w.opts.IdleChange == IdleChangePoolDrift {
		node, err := driftPool(ctx, a.served, a.w.opts.CCMConfig)
		if err != nil {
			return err
		}
		a.env.Mark("pool drift: %s", cmp.Or(node, "none (no node in a pool)"))
		return nil
	}
	if a.w.opts.IdleChange != IdleChangeEndpointsMove {
		return nil
	}
	for s := 0; s < a.w.opts.Services; s += 2 { // the even ones are Local
		if err := a.moveEndpoints(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Churn changes the other Services until ctx ends.
func (a *run) Churn(ctx context.Context) error {
	if a.w.opts.Services < 2 {
		return nil
	}
	endpointTick, serviceTick := time.NewTicker(churnEndpointTick), time.NewTicker(churnServiceTick)
	defer endpointTick.Stop()
	defer serviceTick.Stop()
	// ctx ends the churn, not a change under way: a change started just
	// before its end would fail on the client's rate limiter, which
	// refuses a wait past the deadline.
	call := context.WithoutCancel(ctx)
	for e, s := 0, 0; ; a.act.changes++ {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-endpointTick.C:
			err = a.moveEndpoints(call, 2*(e%((a.w.opts.Services+1)/2)))
			e++
		case <-serviceTick.C:
			err = a.changeOther(call, s)
			s++
		}
		if err != nil {
			return err
		}
	}
}

// moveEndpoints gives other Service i new endpoints on other nodes, as a
// rollout that placed its pods elsewhere would.
func (a *run) moveEndpoints(ctx context.Context, i int) error {
	a.shifts[i]++
	_, want := a.otherService(i)
	slices := a.env.CP.Client.DiscoveryV1().EndpointSlices(a.env.NS)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		sl, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get endpointslice %s: %w", want.Name, err)
		}
		sl.Endpoints = want.Endpoints
		_, err = slices.Update(ctx, sl, metav1.UpdateOptions{})
		return err
	})
}

// changeOther makes the n-th Service change of the churn: a new Service,
// a move to the other load balancer, or a second port added or removed,
// in turn.
func (a *run) changeOther(ctx context.Context, n int) error {
	i := (n / 3) % a.w.opts.Services
	switch n % 3 {
	case 0:
		return a.createOther(ctx, a.w.opts.Services+n/3)
	case 1:
		if a.env.Mode.NodeBacked() && a.w.opts.CCMLoadBalancers == CCMMultipleLBs {
			return a.updateOther(ctx, i, func(svc *corev1.Service) {
				next := "kubernetes-2"
				if svc.Annotations[ccmConfigAnnotation] == next {
					next = "kubernetes"
				}
				svc.Annotations[ccmConfigAnnotation] = next
			})
		}
	}
	return a.updateOther(ctx, i, func(svc *corev1.Service) {
		if len(svc.Spec.Ports) > 1 {
			svc.Spec.Ports = svc.Spec.Ports[:1]
			return
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP})
	})
}

// ccmConfigAnnotation names the CCM's load balancer configuration a
// Service asks for (cloud-provider-azure pkg/consts/consts.go).
const ccmConfigAnnotation = "service.beta.kubernetes.io/azure-load-balancer-configurations"

// updateOther changes other Service i's spec or annotations with f; the
// writers patch its status meanwhile, hence the retry.
func (a *run) updateOther(ctx context.Context, i int, f func(*corev1.Service)) error {
	services := a.env.CP.Client.CoreV1().Services(a.env.NS)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		svc, err := services.Get(ctx, otherName(i), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get service %s: %w", otherName(i), err)
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		f(svc)
		_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
}
