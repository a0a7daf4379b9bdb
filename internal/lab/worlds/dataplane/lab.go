package dataplane

import (
	"context"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// MaxReplicas bounds --data-plane-replicas.
const MaxReplicas = 4

// stopHAProxy stops a data-plane replica's HAProxy of dir, through its
// master socket, the proxy still in front, and returns Close's error. An
// old worker the master no longer lists (a run with hundreds of reloads,
// connections to vanished pods held for the server timeout) would outlive
// it: the lab ends every process of that HAProxy, by the configuration file
// on its command line.
func (p *Plane) stopHAProxy(prov *haproxy.Provider, dir string) error {
	err := prov.Close()
	if n := cluster.KillByArg(filepath.Join(dir, "haproxy.cfg")); n > 0 {
		p.cfg.Logf("%s: killed %d HAProxy processes of %s left after the master stopped", p.cfg.Name, n, dir)
	}
	return err
}

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
