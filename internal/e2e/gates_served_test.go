package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// gateStaysClosed fails the test if the pod's gate opens within a while
// (while the load balancers are known not to serve it).
func gateStaysClosed(t *testing.T, c client.Client, ns, pod, why string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if gateTrue(t, c, ns, pod) {
			t.Fatalf("readiness gate opened while %s", why)
		}
	}
}

// TestGatesTwoLoadBalancers is invariant 5 with two Services (two load
// balancers) selecting one pod: the gate waits until both have registered
// it. The second Service's EndpointSlice lists the pod late, as when the
// EndpointSlice controller is behind.
func TestGatesTwoLoadBalancers(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns, app = "default", "shop"
	if err := c.Create(ctx, lbService(ns, app, "zerodrop.dev/memory", 80, 8080)); err != nil {
		t.Fatal(err)
	}
	admin := lbService(ns, "shop-admin", "zerodrop.dev/memory", 81, 9090)
	admin.Spec.Selector = map[string]string{"app": app}
	if err := c.Create(ctx, admin); err != nil {
		t.Fatal(err)
	}
	gatedPod(t, c, ns, "shop-a", app, "198.18.2.1")
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.2.1", pod: "shop-a"})
	setSlice(t, c, ns, "shop-admin", 9090)
	ctrl := startController(t, cfg, prov, nil, controllerOptions{})
	defer ctrl.stop(t)

	eventually(t, 30*time.Second, "pod registered in the first load balancer", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return fmt.Sprint(backendsOf(lb)) == "[127.18.2.1:8080=active]", fmt.Sprint(backendsOf(lb))
	})
	eventually(t, 30*time.Second, "second load balancer created without the pod", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/shop-admin")
		return lb != nil && len(backendsOf(lb)) == 0, fmt.Sprint(lb)
	})
	gateStaysClosed(t, c, ns, "shop-a", "the second load balancer does not have the pod")

	setSlice(t, c, ns, "shop-admin", 9090, endpoint{ip: "198.18.2.1", pod: "shop-a"})
	eventually(t, 30*time.Second, "readiness gate True once both load balancers serve the pod", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/shop-admin")
		return gateTrue(t, c, ns, "shop-a"), fmt.Sprint(backendsOf(lb))
	})
	if lb, _ := prov.Observe(ctx, ns+"/shop-admin"); fmt.Sprint(backendsOf(lb)) != "[127.18.2.1:9090=active]" {
		t.Fatalf("gate opened; second load balancer has %v", backendsOf(lb))
	}
}

// TestGatesNodeLocal is invariant 5 in node mode with externalTrafficPolicy
// Local: the backend is the pod's node, whose health check answers only once
// a local pod is ready (which waits for this gate). A node without a local
// endpoint is registered drained; the gate opens once the pod's endpoint
// makes its node active, without waiting for the node's health. The node
// drains when its last local pod terminates and is enabled again when a pod
// starts there.
func TestGatesNodeLocal(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns, app = "default", "edge"

	// The pod's node, excluded from load balancers for now (KEP-3458: the
	// exclusion label, not readiness, takes a node out): none registers it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1",
		Labels: map[string]string{model.LabelExcludeFromLB: ""}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.9.1"}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	includeNode := func() {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			t.Fatal(err)
		}
		delete(node.Labels, model.LabelExcludeFromLB)
		if err := c.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}

	svc := lbService(ns, app, "zerodrop.dev/memory", 80, 8080)
	svc.Annotations = map[string]string{model.AnnotationBackendMode: string(model.NodeMode)}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 {
		t.Fatalf("the apiserver allocated no nodePort: %+v", svc.Spec.Ports)
	}
	nodeBackend := fmt.Sprintf("127.18.9.1:%d", nodePort)
	// kube-proxy's health check on the node fails: no local pod is ready.
	prov.SetHealthy(model.ListenerName(ns, app, corev1.ProtocolTCP, 80), nodeBackend, false)
	gatedPod(t, c, ns, "edge-a", app, "198.18.3.1")
	ctrl := startController(t, cfg, prov, nil, controllerOptions{})
	defer ctrl.stop(t)

	eventually(t, 30*time.Second, "load balancer without backends", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return lb != nil && len(backendsOf(lb)) == 0, fmt.Sprint(lb)
	})
	gateStaysClosed(t, c, ns, "edge-a", "the pod's node is not registered")

	// Registered, but drained: the node has no local endpoint of the Service.
	includeNode()
	nodeIs := func(what, state string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() (bool, string) {
			lb, _ := prov.Observe(ctx, ns+"/"+app)
			return lb != nil && fmt.Sprint(backendsOf(lb)) == fmt.Sprintf("[%s=%s]", nodeBackend, state), fmt.Sprint(lb)
		})
	}
	nodeIs("the node registered drained: no local endpoint", "draining")
	gateStaysClosed(t, c, ns, "edge-a", "the pod's node is drained")

	// The first local pod arrives (not ready: it waits for this gate): the
	// node is enabled, and the gate opens without waiting for its health.
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.3.1", pod: "edge-a", node: "node-1"})
	eventually(t, 30*time.Second, "readiness gate True once the node is registered and active", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return gateTrue(t, c, ns, "edge-a"), fmt.Sprint(backendsOf(lb))
	})
	if lb, _ := prov.Observe(ctx, ns+"/"+app); fmt.Sprint(backendsOf(lb)) != fmt.Sprintf("[%s=active]", nodeBackend) {
		t.Fatalf("gate opened; load balancer has %v", backendsOf(lb))
	}

	// The last local pod stops: its node drains (kube-proxy still forwards
	// established connections to it, KEP-1669), and stays registered.
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.3.1", pod: "edge-a", node: "node-1", serving: true, terminating: true})
	nodeIs("the node drained when its last local pod terminates", "draining")
	// A pod starts there again: the node is enabled again.
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.3.2", pod: "edge-b", node: "node-1"})
	nodeIs("the node enabled when a pod starts there again", "active")
}
