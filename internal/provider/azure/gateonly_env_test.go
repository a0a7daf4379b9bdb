package azure_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestGateOnlyNeverWritten runs the whole controller (controller.Build, as
// `zerodrop controller --provider azure --adopt-classless
// --azure-gate-only-load-balancers kubernetes-internal` wires it) on the
// real apiserver and the ARM emulator, with a classless gate-only Service
// whose load balancer the CCM wrote (seeded as the CCM writes it): the
// readiness gate opens for a pod whose node is in the rule's pool and stays
// closed for one whose node is not, and zerodrop makes no ARM write at all
// and writes nothing on the Service (no finalizer, its status as the other
// controller left it) — although --adopt-classless would take a classless
// Service.
func TestGateOnlyNeverWritten(t *testing.T) {
	rc := apiserver(t)
	c := newClient(t, rc)
	ns := namespace(t, c, "gate-only")
	ctx := context.Background()
	emu := azurearm.New(azurearm.Options{})
	if err := emu.Seed(subID, group, ccmLB("kubernetes-internal", "10.0.1.4", "10.0.1.5")); err != nil {
		t.Fatal(err)
	}
	pr := &probes{up: map[string]bool{"10.0.1.4": true, "10.0.1.5": true}}
	emu.SetRuleHealth(pr.health)
	_, from := emu.Calls(0)

	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	in := buildController(t, runCtx, rc, gateOnlyProvider(t, emu), m, ns, service.SyncIncremental, "0", func(cfg *controller.Config) {
		cfg.AdoptClassless = true
		cfg.Azure.GateOnlyLoadBalancers = "kubernetes-internal"
		cfg.Override.GatePollInterval = 50 * time.Millisecond
	})
	done := make(chan error, 1)
	go func() { done <- in.Start(runCtx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	for name, ip := range map[string]string{"n1": "10.0.1.4", "n9": "10.0.1.9"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{model.AnnotationGateOnly: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.240.0.10"}} // as the CCM reports it
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for name, node := range map[string]string{"in-pool": "n1", "not-in-pool": "n9"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: ns + "-" + node, Containers: []corev1.Container{{Name: "app", Image: "app"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		addr := map[string]string{"in-pool": "10.244.1.5", "not-in-pool": "10.244.9.5"}[name]
		pod.Status.PodIP, pod.Status.PodIPs = addr, []corev1.PodIP{{IP: addr}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To(ns + "-" + node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: pod.UID},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}})
	}
	if err := c.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}

	// A Service zerodrop does write, created after the gate-only one: once
	// it has its address the controller has reconciled what it takes.
	own := lbService(ns, "own", "lb-a", false)
	if err := c.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "zerodrop's own Service written", func() (bool, string) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(own), &s); err != nil {
			return false, err.Error()
		}
		return len(s.Status.LoadBalancer.Ingress) > 0, "no ingress yet"
	})
	calls, _ := emu.Calls(from)
	for _, call := range calls {
		if call.Method == "GET" || call.Kind == "ruleHealth" || call.Kind == "operationResult" || call.Kind == "operation" {
			continue
		}
		if !call.Write() || strings.Contains(call.Resource, "kubernetes-internal") || !onlyOwn(call.Changes, ns) {
			t.Errorf("zerodrop wrote to ARM for the gate-only Service: %s %v", call, call.Changes)
		}
	}
	gate := func(name string) corev1.ConditionStatus {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
			t.Fatal(err)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == podgate.ConditionType {
				return cond.Status
			}
		}
		return ""
	}
	testutil.Eventually(t, 30*time.Second, "the readiness gate of the pod whose node is in the CCM's pool", func() (bool, string) {
		s := gate("in-pool")
		return s == corev1.ConditionTrue, string(s)
	})
	if s := gate("not-in-pool"); s == corev1.ConditionTrue {
		t.Error("the readiness gate opened for a pod whose node is not in the rule's pool")
	}
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) > 0 || len(got.Status.Conditions) > 0 || len(got.Status.LoadBalancer.Ingress) != 1 ||
		got.Status.LoadBalancer.Ingress[0].IP != "127.240.0.10" {
		t.Errorf("zerodrop wrote the gate-only Service: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
}

// onlyOwn: every change names zerodrop's own Service "own" of ns (its zd-
// children), or the load balancer's tags, nothing of Service "web".
func onlyOwn(changes []string, ns string) bool {
	for _, ch := range changes {
		if strings.Contains(ch, ns+".web") {
			return false
		}
	}
	return true
}
