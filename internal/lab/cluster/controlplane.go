package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// kcmControllers are the kube-controller-manager loops the lab needs: a
// Deployment rolls through ReplicaSets, Services get EndpointSlices, PDBs get
// their status (the eviction API reads it), owned objects are collected and
// node heartbeats are watched.
// The HAProxy data plane installed from the chart is a DaemonSet.
const kcmControllers = "deployment,replicaset,daemonset,endpointslice,disruption,garbagecollector,nodelifecycle"

// controlPlane is a real kube-apiserver + etcd (envtest, from the binaries
// hack/control-plane.sh builds) and a real kube-controller-manager.
type ControlPlane struct {
	env        *controlplane.Env
	Config     *rest.Config
	kubeconfig string // admin kubeconfig file, for child processes
	Client     kubernetes.Interface

	kcm *supervisor.Process
}

// startControlPlane starts the control plane with its files under dir. On
// error everything already started is stopped again.
func StartControlPlane(ctx context.Context, dir string) (cp *ControlPlane, err error) {
	started := &ControlPlane{}
	cp = started
	defer func() {
		if err != nil {
			started.Stop() // cp is nil by now
		}
	}()
	egressFile := filepath.Join(dir, "egress-selector.yaml")
	if err := egressConfig(egressFile, EgressSocket(dir)); err != nil {
		return nil, err
	}
	env, err := controlplane.RunWithFlags(serviceCIDR, map[string]string{"egress-selector-config-file": egressFile})
	if err != nil {
		return nil, err
	}
	cp.env = env
	user, err := env.AddUser(envtest.User{Name: "lab-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("control plane user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("control plane kubeconfig: %w", err)
	}
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	cp.Config = rest.CopyConfig(user.Config())
	cp.Config.QPS, cp.Config.Burst = 200, 400
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, err
	}
	if err := cp.startKCM(dir); err != nil {
		return nil, err
	}
	if err := cp.waitNamespace(ctx, "kube-node-lease"); err != nil {
		return nil, err
	}
	return cp, nil
}

// startKCM runs kube-controller-manager as a child process in its own
// process group (a terminal's Ctrl-C reaches the lab only, which stops it in
// order) that dies with the lab.
func (cp *ControlPlane) startKCM(dir string) error {
	assets, err := controlplane.Assets("all")
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	kcm, err := supervisor.Start(supervisor.Spec{
		Name: filepath.Join(assets, "kube-controller-manager"),
		Args: []string{
			"--kubeconfig=" + cp.kubeconfig,
			"--controllers=" + kcmControllers,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		},
		Log:           filepath.Join(dir, "kube-controller-manager.log"),
		Grace:         10 * time.Second,
		DieWithParent: true,
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	cp.kcm = kcm
	return nil
}

// waitNamespace waits for a namespace the API server creates itself.
func (cp *ControlPlane) waitNamespace(ctx context.Context, name string) error {
	return traffic.WaitFor(ctx, 30*time.Second, "namespace "+name, func() (bool, string) {
		_, err := cp.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// kcmAlive reports an error when kube-controller-manager has exited.
func (cp *ControlPlane) KCMAlive() error {
	if cp.kcm != nil && cp.kcm.Exited() {
		return errors.New("kube-controller-manager exited (see kube-controller-manager.log)")
	}
	return nil
}

// stop stops kube-controller-manager, then kube-apiserver and etcd.
func (cp *ControlPlane) Stop() {
	if cp.kcm != nil {
		_ = cp.kcm.Stop()
		cp.kcm = nil
	}
	if cp.env != nil {
		_ = cp.env.Stop()
		cp.env = nil
	}
}
