package dataplane

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// MaxReplicas bounds --data-plane-replicas.
const MaxReplicas = 4

// ServiceAccountToken is the kubelet's projected token for pod, through
// client: a TokenRequest for its ServiceAccount, bound to the pod.
func ServiceAccountToken(client kubernetes.Interface) func(ctx context.Context, pod *corev1.Pod) (string, error) {
	return func(ctx context.Context, pod *corev1.Pod) (string, error) {
		sa := pod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To[int64](24 * 3600),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return tr.Status.Token, nil
	}
}
