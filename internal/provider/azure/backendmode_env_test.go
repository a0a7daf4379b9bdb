package azure_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestDefaultBackendModeUpgrade: the whole controller on the real
// apiserver and the ARM emulator. A Service without the backend-mode
// annotation gets node mode, the Azure provider's default (its rule's pool
// holds the nodes); a Service the load balancer already serves in IP mode
// keeps it when its annotation goes, as a Service an earlier version
// served by its IP-mode default does after the upgrade: no ARM write, its
// pool goes on following its endpoints, a new pod's readiness gate opens
// on its own address (the gates settle the mode as the controller does),
// and its ConfigValid condition says why. The annotation node asks to
// move it, which Azure cannot hold in one step: refused, pool kept.
func TestDefaultBackendModeUpgrade(t *testing.T) {
	rc := apiserver(t)
	c := newClient(t, rc)
	ns := namespace(t, c, "backend-mode")
	ctx := context.Background()
	emu := azurearm.New(azurearm.Options{})
	nodeIPs := []string{"10.240.8.1", "10.240.8.2"}
	for i, ip := range nodeIPs {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + string(rune('a'+i))}}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, rc, emu, ns, service.SyncIncremental, "lb-a")

	// pool is what the Service's rule's pool holds, this test's nodes and
	// pods only (the apiserver is shared: earlier tests' nodes are in a
	// node-mode pool too).
	pool := func(name string) string {
		var out []string
		for _, s := range emulatorState(emu, "lb-a")["lb-a/zd-"+ns+"."+name+".tcp-80"] {
			if ip, _, _ := strings.Cut(s, "="); strings.HasPrefix(ip, "10.244.") || ip == nodeIPs[0] || ip == nodeIPs[1] {
				out = append(out, ip)
			}
		}
		return strings.Join(out, " ")
	}
	condition := func(name string) string {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return err.Error()
		}
		if cond := meta.FindStatusCondition(s.Status.Conditions, service.ConditionConfigValid); cond != nil && cond.ObservedGeneration == s.Generation {
			return cond.Message
		}
		return "no ConfigValid condition of this generation"
	}
	writes := func() int {
		calls, _ := emu.Calls(0)
		n := 0
		for _, call := range calls {
			if call.Method != "GET" && strings.Contains(call.Resource, "lb-a") {
				n++
			}
		}
		return n
	}

	// Served in IP mode, as an earlier version served every Service
	// without the annotation.
	old := lbService(ns, "old", "lb-a", false)
	if old.Annotations[model.AnnotationBackendMode] != string(model.IPMode) {
		t.Fatalf("lbService's annotations %v: the tests' Services ask for IP mode", old.Annotations)
	}
	slice := endpointSlice(ns, "old", "10.244.0.1", "10.244.0.2")
	for _, o := range []client.Object{old, slice} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the IP-mode pool", func() (bool, string) {
		p := pool("old")
		return p == "10.244.0.1 10.244.0.2", p
	})

	// The pool shows in the emulator's state before the write that made
	// it is in its record of calls: count from once the Service's status
	// is written, after the write returned.
	testutil.Eventually(t, 30*time.Second, "the IP-mode Service's condition and its write recorded", func() (bool, string) {
		m := condition("old")
		return m != "no ConfigValid condition of this generation" && writes() > 0, fmt.Sprintf("%s; %d writes", m, writes())
	})

	// The upgrade: the annotation goes, the default is node mode, and
	// nothing moves.
	before := writes()
	if err := update(ctx, c, &corev1.Service{}, ns, "old", func(o client.Object) {
		delete(o.(*corev1.Service).Annotations, model.AnnotationBackendMode)
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the condition saying IP mode is kept", func() (bool, string) {
		m := condition("old")
		return strings.Contains(m, model.KeptServed), m
	})
	if p, n := pool("old"), writes(); p != "10.244.0.1 10.244.0.2" || n != before {
		calls, _ := emu.Calls(0)
		t.Fatalf("after the annotation went: pool %q, %d ARM writes; want the pods' pool and no write (calls %+v)", p, n-before, calls)
	}

	// Still IP mode: a new pod is added by its address, and its readiness
	// gate opens on that address in the pool.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old-3", Labels: map[string]string{"app": "old"}},
		Spec: corev1.PodSpec{NodeName: ns + "-a", Containers: []corev1.Container{{Name: "app", Image: "app"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// Its containers ready, it waits for the gate alone: the controller
	// registers it.
	pod.Status.PodIP, pod.Status.PodIPs = "10.244.0.3", []corev1.PodIP{{IP: "10.244.0.3"}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, slice.Name, func(o client.Object) {
		s := o.(*discoveryv1.EndpointSlice)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.3"}, NodeName: ptr.To(ns + "-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}})
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the new pod's readiness gate, on its address", func() (bool, string) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == podgate.ConditionType {
				return cond.Status == corev1.ConditionTrue, cond.Message + "; pool " + pool("old")
			}
		}
		return false, "no condition; pool " + pool("old")
	})
	if p := pool("old"); p != "10.244.0.1 10.244.0.2 10.244.0.3" {
		t.Fatalf("pool %q: want the three pods", p)
	}

	// A new Service without the annotation: node mode, by the default.
	fresh := lbService(ns, "new", "lb-a", false)
	delete(fresh.Annotations, model.AnnotationBackendMode)
	for _, o := range []client.Object{fresh, endpointSlice(ns, "new", "10.244.1.1")} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the new Service's pool of nodes", func() (bool, string) {
		p := pool("new")
		return p == strings.Join(nodeIPs, " "), p
	})
	// The condition is written after the pool: wait for it too (a loaded
	// machine's status write can come seconds after the ARM write).
	testutil.Eventually(t, 30*time.Second, "the new Service's condition naming the default node mode", func() (bool, string) {
		m := condition("new")
		return strings.Contains(m, "backend mode node, the provider's default"), m
	})

	// The annotation node asks to move the old Service: Azure cannot hold
	// the step between (the pods draining at their port, the nodes at the
	// nodePort: a rule has one backend port), so the Service is refused
	// as Unrepresentable and its pool stays as it is (invariant 7), as it
	// did before the default changed (docs/azure.md, "Pools").
	if err := update(ctx, c, &corev1.Service{}, ns, "old", func(o client.Object) {
		o.(*corev1.Service).Annotations[model.AnnotationBackendMode] = string(model.NodeMode)
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the move refused, the pool kept", func() (bool, string) {
		m := condition("old")
		return strings.Contains(m, "one backend port") && pool("old") == "10.244.0.1 10.244.0.2 10.244.0.3", m + "; pool " + pool("old")
	})
}
