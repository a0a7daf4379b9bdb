package scenarios

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

func (r *run) updateService(ctx context.Context, change func(*corev1.Service)) error {
	services := r.lab.cp.Client.CoreV1().Services(r.ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := services.Get(ctx, appName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(svc)
		_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
}

// rolloutRestart is `kubectl rollout restart`: a new template annotation.
func (r *run) rolloutRestart(ctx context.Context) error {
	r.mark("rollout")
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.zerodrop.dev/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	_, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Patch(ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (r *run) scale(ctx context.Context, n int32) error {
	r.mark("scale to %d", n)
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Patch(ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (l *lab) setUnschedulable(ctx context.Context, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	_, err := l.cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
