package service_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// updateNode re-reads a node, changes it and writes spec/metadata and status.
func updateNode(t *testing.T, c client.Client, name string, mutate func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	mutate(&n)
	status := n.Status
	if err := c.Update(ctx, &n); err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
	n.Status = status
	if err := c.Status().Update(ctx, &n); err != nil {
		t.Fatalf("update status of node %s: %v", name, err)
	}
}

func setReady(n *corev1.Node, st corev1.ConditionStatus) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "Test",
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}
}

// createReadyNodes creates a Ready Node per name of ips, with that
// internal address.
func createReadyNodes(t *testing.T, c client.Client, ips map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(ips)) {
		if err := c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		updateNode(t, c, name, func(n *corev1.Node) {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ips[name]}}
			setReady(n, corev1.ConditionTrue)
		})
	}
}

// drainedThenRemoved reports whether the writes drained the backend (an
// update to draining) before removing it.
func drainedThenRemoved(writes []string, backend string) bool {
	drain := slices.IndexFunc(writes, func(w string) bool {
		return strings.HasPrefix(w, string(model.OpUpdateBackend)+" ") && strings.HasSuffix(w, " "+backend)
	})
	remove := slices.IndexFunc(writes, func(w string) bool {
		return strings.HasPrefix(w, string(model.OpRemoveBackend)+" ") && strings.HasSuffix(w, " "+backend)
	})
	return drain >= 0 && remove > drain
}

// TestNodeModeKeepsNotReadyNodes: as the upstream service controller since
// KEP-3458, node readiness and cordons do not change node-mode backends (a
// control-plane partition marks every node Unknown; the probes decide health).
// Only the exclusion label, the cluster autoscaler's deletion taint or the
// node's deletion take a node out, and it drains before it goes.
func TestNodeModeKeepsNotReadyNodes(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	ips := map[string]string{"n1": "192.0.2.11", "n2": "192.0.2.12", "n3": "192.0.2.13"}
	createReadyNodes(t, c, ips)
	svc := lbService(ns, "nodes", "zerodrop.dev/memory", map[string]string{model.AnnotationBackendMode: string(model.NodeMode)})
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 {
		t.Fatal("the apiserver allocated no nodePort")
	}
	backend := func(node string) string { return fmt.Sprintf("%s:%d", ips[node], nodePort) }
	all := []string{backend("n1") + "=active", backend("n2") + "=active", backend("n3") + "=active"}

	r := startController(t, cfg, prov, service.SyncIncremental)
	eventually(t, 30*time.Second, "three node backends", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/nodes")
		return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(all), fmt.Sprint(backendsOf(lb))
	})
	before := len(prov.Writes())

	// A control-plane partition: every node Unknown or NotReady, one cordoned.
	updateNode(t, c, "n1", func(n *corev1.Node) { setReady(n, corev1.ConditionUnknown) })
	updateNode(t, c, "n2", func(n *corev1.Node) { setReady(n, corev1.ConditionUnknown); n.Spec.Unschedulable = true })
	updateNode(t, c, "n3", func(n *corev1.Node) { setReady(n, corev1.ConditionFalse) })
	// Make sure a reconcile runs after the controller saw the nodes: touch
	// the Service a moment later and wait for a reconcile after that.
	time.Sleep(time.Second)
	reconciles := metrics.Sum(r.metrics.Reconciles)
	updateService(t, c, ns, "nodes", func(s *corev1.Service) { s.Annotations["example.com/touched"] = "1" })
	eventually(t, 30*time.Second, "a reconcile after the partition", func() (bool, string) {
		n := metrics.Sum(r.metrics.Reconciles)
		return n > reconciles, fmt.Sprintf("reconciles %v, before %v", n, reconciles)
	})
	time.Sleep(2 * time.Second) // a drain, were there one, would be under way now
	if w := prov.Writes()[before:]; len(w) != 0 {
		t.Fatalf("NotReady/Unknown/cordoned nodes made writes: %v", w)
	}
	lb, _ := prov.Observe(ctx, ns+"/nodes")
	if got := fmt.Sprint(backendsOf(lb)); got != fmt.Sprint(all) {
		t.Fatalf("backends after the partition = %v, want %v", got, all)
	}

	// The exclusion label takes n1 out: drained, then removed.
	updateNode(t, c, "n1", func(n *corev1.Node) {
		n.Labels = map[string]string{model.LabelExcludeFromLB: "true"}
	})
	eventually(t, 30*time.Second, "n1 drained and removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/nodes")
		want := all[1:]
		return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(want) && drainedThenRemoved(prov.Writes(), backend("n1")),
			fmt.Sprintf("backends %v writes %v", backendsOf(lb), prov.Writes()[before:])
	})

	// The cluster autoscaler's deletion taint takes n2 out the same way.
	updateNode(t, c, "n2", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler",
			Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	})
	eventually(t, 30*time.Second, "n2 drained and removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/nodes")
		want := all[2:]
		return fmt.Sprint(backendsOf(lb)) == fmt.Sprint(want) && drainedThenRemoved(prov.Writes(), backend("n2")),
			fmt.Sprintf("backends %v writes %v", backendsOf(lb), prov.Writes()[before:])
	})
	r.stop(t)
}
