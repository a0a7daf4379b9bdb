package scenarios

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
)

// startDrainService creates the controllers' namespace and the drain
// Service: a ClusterIP Service with the fixed address drainClusterIP (the
// webhook's hook host), reached from the nodes through kube-proxy. Its
// selector names one run's replicas at a time (selectDrainReplicas).
func (l *lab) startDrainService(ctx context.Context) error {
	cs := l.cp.Client
	if err := l.ctrlNamespace(ctx); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: drainService, Namespace: ctrlNamespace},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: cluster.DrainClusterIP,
			Selector:  map[string]string{"app": ctrlApp, labelRun: "none"},
			Ports: []corev1.ServicePort{{Name: "drain", Port: drainPort, TargetPort: intstr.FromString("drain"),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := cs.CoreV1().Services(ctrlNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("drain service: %w", err)
	}
	return nil
}

// ctrlNamespace creates the controllers' namespace.
func (l *lab) ctrlNamespace(ctx context.Context) error {
	_, err := l.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ctrlNamespace}},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ctrlNamespace, err)
	}
	return nil
}

// selectDrainReplicas points the drain Service at run id's controller pods.
func (l *lab) selectDrainReplicas(ctx context.Context, id int) error {
	patch := fmt.Sprintf(`{"spec":{"selector":{"app":%q,%q:%q}}}`, ctrlApp, labelRun, strconv.Itoa(id))
	_, err := l.cp.Client.CoreV1().Services(ctrlNamespace).Patch(ctx, drainService, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("drain service selector: %w", err)
	}
	return nil
}
