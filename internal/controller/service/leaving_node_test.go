package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestNodeModeLeavingNodeKeepsItsConnections: a node marked leaving (the
// cluster autoscaler's deletion taint, the exclusion label) drains, and
// while its Node stands it stays drained past the drain timeout for as
// long as it has connections: kube-proxy there still forwards them. It
// goes when its connections end, or once its Node is deleted (then at the
// drain timeout, connections or not).
func TestNodeModeLeavingNodeKeepsItsConnections(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns = "default"
	ips := map[string]string{"n1": "192.0.2.21", "n2": "192.0.2.22", "n3": "192.0.2.23"}
	createReadyNodes(t, c, ips)
	const drainTimeout = time.Second
	svc := lbService(ns, "leaving", "zerodrop.dev/memory", map[string]string{model.AnnotationBackendMode: string(model.NodeMode),
		model.AnnotationDrainTimeout: drainTimeout.String()})
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	listener := model.ListenerName(ns, "leaving", "TCP", 80)
	backend := func(node string) string { return fmt.Sprintf("%s:%d", ips[node], nodePort) }
	r := startController(t, cfg, prov, service.SyncIncremental)
	states := func() string {
		lb, _ := prov.Observe(ctx, ns+"/leaving")
		return fmt.Sprint(backendsOf(lb))
	}
	waitFor := func(what string, want []string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() (bool, string) {
			return states() == fmt.Sprint(want), fmt.Sprintf("backends %s, writes %v", states(), prov.Writes())
		})
	}
	waitFor("three node backends", []string{backend("n1") + "=active", backend("n2") + "=active", backend("n3") + "=active"})
	// A reconcile after a change that leaves these backends alone (the
	// Service touched): it must keep a staying node drained.
	touch := func(v string) {
		updateService(t, c, ns, "leaving", func(s *corev1.Service) { s.Annotations["example.com/touched"] = v })
	}

	// n1, tainted, with an open connection: drained, and still drained
	// after several drain timeouts and another reconcile.
	prov.SetConnections(listener, backend("n1"), 1)
	updateNode(t, c, "n1", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: model.TaintToBeDeletedByClusterAutoscaler,
			Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	})
	drained := []string{backend("n1") + "=draining", backend("n2") + "=active", backend("n3") + "=active"}
	waitFor("n1 drained", drained)
	time.Sleep(3 * drainTimeout)
	touch("1")
	time.Sleep(3 * drainTimeout)
	if got := states(); got != fmt.Sprint(drained) {
		t.Fatalf("a tainted node with a connection open, its Node standing, after its drain timeout: backends %s, want %v", got, drained)
	}
	// Its connection ends: it goes at the next reconcile.
	prov.SetConnections(listener, backend("n1"), 0)
	touch("2")
	waitFor("n1 removed once its connections ended", []string{backend("n2") + "=active", backend("n3") + "=active"})

	// n2, labelled, with a connection that never ends: drained; its Node
	// deleted, it goes at the drain timeout.
	prov.SetConnections(listener, backend("n2"), 1)
	updateNode(t, c, "n2", func(n *corev1.Node) { n.Labels = map[string]string{model.LabelExcludeFromLB: "true"} })
	waitFor("n2 drained", []string{backend("n2") + "=draining", backend("n3") + "=active"})
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}); err != nil {
		t.Fatal(err)
	}
	waitFor("n2 removed after its Node's deletion", []string{backend("n3") + "=active"})
	r.stop(t)
}
