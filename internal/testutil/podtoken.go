package testutil

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// AdminServiceAccount makes the ServiceAccount ns/name bound to
// cluster-admin (the tests' stand-in for a role's RBAC), if missing.
func AdminServiceAccount(t testing.TB, cfg *rest.Config, ns, name string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-admin-" + ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// PodConfig is cfg authenticated as pod's ServiceAccount with a token bound
// to the pod, as the kubelet's projected token is: the API server adds the
// pod's name and UID to the user's extra.
func PodConfig(t testing.TB, cfg *rest.Config, pod *corev1.Pod) *rest.Config {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	out := rest.AnonymousClientConfig(cfg)
	out.BearerToken = tr.Status.Token
	return out
}
