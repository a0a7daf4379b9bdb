// Package ccmworld is what a test of the real cloud-controller-manager of
// cloud-provider-azure (internal/lab/ccm) needs around it: a control plane,
// the ARM emulator on HTTPS and the CCM's processes, all stopped at the
// test's end. TestRealCCM and internal/install's tests of the chart with
// the real CCM share it; the lab itself does not use it.
package ccmworld

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
)

// World is what a test of the real CCM needs: a control plane, the
// emulator on HTTPS with the cluster's network (frontends from
// 127.240.0.0/16) and security group, and a CCM configuration that reaches
// both (Base: start processes with Start). Everything stops at the test's
// end.
type World struct {
	REST *rest.Config
	CS   *kubernetes.Clientset
	Emu  *azurearm.Emulator
	Base ccm.Config
}

// New builds (or reuses) the CCM binary and starts the world, its
// resources named by res (VNet, Subnet and SecurityGroup are seeded in the
// emulator).
func New(t testing.TB, res ccm.Resources) *World {
	t.Helper()
	bin, err := ccm.BinaryVersion("")
	if err != nil {
		t.Fatal(err)
	}
	rc, dir, kc := StartControlPlane(t)
	w := &World{REST: rc, CS: kubernetes.NewForConfigOrDie(rc),
		Base: ccm.Config{Binary: bin, Dir: dir, Kubeconfig: kc, Resources: res}}
	w.NewEmulator(t)
	return w
}

// StartControlPlane starts a control plane for a CCM test (stopped at the
// test's end) and writes a kubeconfig for the CCM's processes into dir, a
// directory of the test's: the part every cloud's CCM world shares.
func StartControlPlane(t testing.TB) (rc *rest.Config, dir, kubeconfig string) {
	t.Helper()
	env := controlplane.StartEnv(t)
	dir = t.TempDir()
	kc, err := cluster.WriteKubeconfig(env.Config, env.Config.Host, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	return env.Config, dir, kc
}

// NewEmulator gives the world a new emulator on HTTPS, holding only the
// cluster's network (frontends from 127.240.0.0/16) and security group, in
// place of the one it had (which stops at the end of the test that made
// it): a test that runs several CCM configurations on one control plane
// gives each an Azure of its own.
func (w *World) NewEmulator(t testing.TB) *azurearm.Emulator {
	t.Helper()
	res := w.Base.Resources
	emu := azurearm.New(azurearm.Options{})
	emu.SeedSubnet(res.SubscriptionID, res.ResourceGroup, res.VNet, res.Subnet, netip.MustParsePrefix("127.240.0.0/16"))
	emu.SeedSecurityGroup(res.SubscriptionID, res.ResourceGroup, res.SecurityGroup)
	served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	w.Emu, w.Base.Emulator = emu, served
	return emu
}

// Node creates a Ready node with InternalIP ip and labels.
func (w *World) Node(t testing.TB, name, ip string, labels map[string]string) {
	t.Helper()
	w.NodeWithProviderID(t, name, ip, "", labels)
}

// NodeWithProviderID is Node with spec.providerID set, as the kubelet or
// the cloud node manager sets it on a node that is an Azure VM (the CCM
// here runs only the service controller, which never sets it).
func (w *World) NodeWithProviderID(t testing.TB, name, ip, providerID string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n, err := w.CS.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if _, err := w.CS.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Start starts a CCM process named identity with Base's configuration;
// the returned function stops it, as does the test's end, which logs the
// tail of its log when the test failed.
func (w *World) Start(t testing.TB, identity string) (stop func()) {
	t.Helper()
	c := w.Base
	c.Identity = identity
	p, err := ccm.Start(c, identity)
	if err != nil {
		t.Fatal(err)
	}
	stop = func() { _ = p.Stop() }
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(ccm.LogPath(c.Dir, identity))
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", identity, b)
		}
	})
	return stop
}

// Ingress waits up to bound for Service ns/name's load-balancer address.
func (w *World) Ingress(t testing.TB, ns, name string, bound time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		s, err := w.CS.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
			return s.Status.LoadBalancer.Ingress[0].IP
		}
		if err == nil {
			err = fmt.Errorf("no ingress yet")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s has no load-balancer address within %s: %v", ns, name, bound, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
