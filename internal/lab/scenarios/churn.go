package scenarios

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
)

// actChurn scales up and down every 1.5 s while the Service is changed every
// 2 s (health-check interval annotation and a second port, in turn), for
// 15 s, beside the world's own churn if it has one (world.Churner); then
// back to 3 replicas and the original Service.
func actChurn(ctx context.Context, r *run) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var g errgroup.Group
	if c, ok := r.world.(world.Churner); ok {
		g.Go(func() error { return c.Churn(cctx) })
	}
	g.Go(func() error {
		for i := 0; traffic.SleepCtx(cctx, 1500*time.Millisecond); i++ {
			if err := r.scale(ctx, []int32{5, 2, 4, 3, 5, 2, 4, 3, 5, 2}[i%10]); err != nil {
				return err
			}
		}
		return nil
	})
	g.Go(func() error {
		for i := 0; traffic.SleepCtx(cctx, 2*time.Second); i++ {
			if err := r.flipService(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if err := r.scale(ctx, replicas); err != nil {
		return err
	}
	if err := r.restoreService(ctx); err != nil {
		return err
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// flipService changes the Service the way a team does while it deploys:
// step i%4 sets the health-check interval annotation, adds a second port,
// removes the annotation, removes the port.
func (r *run) flipService(ctx context.Context, i int) error {
	labels := []string{"annotate health-check-interval=3s", "add port 8001", "remove annotation", "remove port 8001"}
	r.mark("service: %s", labels[i%4])
	return r.updateService(ctx, func(svc *corev1.Service) {
		switch i % 4 {
		case 0:
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			svc.Annotations[model.AnnotationHealthCheckInterval] = "3s"
		case 1:
			svc.Spec.Ports = append(svc.Spec.Ports[:1], corev1.ServicePort{Name: "alt", Port: servicePort + 1,
				TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP})
		case 2:
			delete(svc.Annotations, model.AnnotationHealthCheckInterval)
		case 3:
			svc.Spec.Ports = svc.Spec.Ports[:1]
		}
	})
}

func (r *run) restoreService(ctx context.Context) error {
	return r.updateService(ctx, func(svc *corev1.Service) {
		delete(svc.Annotations, model.AnnotationHealthCheckInterval)
		svc.Spec.Ports = svc.Spec.Ports[:1]
	})
}
