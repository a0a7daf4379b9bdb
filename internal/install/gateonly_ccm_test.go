package install

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/testutil"
	"zerodrop.dev/zerodrop/internal/testutil/ccmworld"
)

// The cluster's Azure resources on the emulator, as the CCM's cloud config
// names them.
const (
	gateOnlySub    = "00000000-0000-0000-0000-00000000000b"
	gateOnlyGroup  = "rg-cluster"
	gateOnlySubnet = "/subscriptions/" + gateOnlySub + "/resourceGroups/" + gateOnlyGroup +
		"/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
)

// TestChartGateOnlyWithRealCCM installs gate-only mode from its documented
// value (azure.gateOnlyLoadBalancers) beside the real cloud-controller-manager
// of cloud-provider-azure, which writes the load balancer, on the ARM
// emulator and a real apiserver: the controller container's arguments as
// the chart renders them, run in process (ports moved to free loopback
// ones, the emulator's credential, and the webhook off: its server's port
// is fixed, and its gate-only injection is internal/webhook's test). A pod
// of a classless Service annotated zerodrop.dev/gate-only, on a node the
// CCM put in its pool, gets its readiness gate; one on a node the CCM left
// out (node.kubernetes.io/exclude-from-external-load-balancers) does not;
// zerodrop writes nothing to ARM and nothing on the Service. Here the CCM
// runs the lab's configuration: pools of node IPs (nodeIP).
func TestChartGateOnlyWithRealCCM(t *testing.T) {
	gateOnlyWithRealCCM(t, func(t *testing.T, w *ccmworld.World) (string, string) {
		w.Node(t, "in-pool", "10.1.0.4", nil)
		w.Node(t, "excluded", "10.1.0.9", map[string]string{corev1.LabelNodeExcludeBalancers: ""})
		return "in-pool", "excluded"
	})
}

// gateOnlyWithRealCCM is TestChartGateOnlyWithRealCCM's run on the cluster
// nodes makes: it returns the node the CCM puts in its pool and the one it
// leaves out.
func gateOnlyWithRealCCM(t *testing.T, nodes func(t *testing.T, w *ccmworld.World) (inPool, excluded string)) {
	d := typed[appsv1.Deployment](t, find(t, render(t,
		"azure.subscriptionID="+gateOnlySub, "azure.resourceGroup="+gateOnlyGroup,
		"azure.loadBalancers={zerodrop}", "azure.subnetID="+gateOnlySubnet,
		"azure.workloadIdentity.enabled=false",
		"azure.gateOnlyLoadBalancers=kubernetes-internal",
	), "Deployment", "zerodrop"))
	cfg := containerArgs(t, d.Spec.Template.Spec.Containers[0])
	if cfg.Azure.GateOnlyLoadBalancers != "kubernetes-internal" {
		t.Fatalf("--azure-gate-only-load-balancers %q from the chart, want kubernetes-internal", cfg.Azure.GateOnlyLoadBalancers)
	}

	w := ccmworld.New(t, ccm.Resources{SubscriptionID: gateOnlySub, ResourceGroup: gateOnlyGroup, Location: "westeurope",
		VNet: "vnet", Subnet: "nodes", SecurityGroup: "nsg"})
	inPool, excluded := nodes(t, w)
	cs, emu := w.CS, w.Emu
	ctx := context.Background()
	_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{
			"service.beta.kubernetes.io/azure-load-balancer-internal": "true",
			model.AnnotationGateOnly:                                  "true",
		}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Start(t, "ccm")
	svcIP := w.Ingress(t, "default", "web", 3*time.Minute)

	// zerodrop, as the chart runs it.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg.RESTConfig, cfg.Registerer = w.REST, prometheus.NewRegistry()
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Webhook.Enabled = false
	log := testr.New(t)
	cfg.Override.Logger = &log
	if cfg.Azure.Credential, cfg.Azure.ClientOptions, err = azurearm.Remote(w.Base.Emulator.URL, w.Base.Emulator.CAPEM, "zerodrop"); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	in, err := controller.Build(runCtx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- in.Start(runCtx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	// The pods, as the webhook admits them: with the readiness gate.
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}}
	for node, addr := range map[string]string{inPool: "10.244.1.5", excluded: "10.244.9.5"} {
		pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + node, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIP, pod.Status.PodIPs = addr, []corev1.PodIP{{IP: addr}}
		if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To(node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod.Name, UID: pod.UID},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}})
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gate := func(name string) corev1.ConditionStatus {
		pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == podgate.ConditionType {
				return c.Status
			}
		}
		return ""
	}
	testutil.Eventually(t, time.Minute, "the readiness gate of the pod whose node is in the CCM's pool", func() (bool, string) {
		s := gate("web-" + inPool)
		return s == corev1.ConditionTrue, string(s)
	})
	if s := gate("web-" + excluded); s == corev1.ConditionTrue {
		t.Error("the readiness gate opened for a pod whose node the CCM left out of its pool")
	}

	calls, _ := emu.Calls(0)
	var read bool
	for _, c := range calls {
		if c.Client != "zerodrop" {
			continue
		}
		read = read || (c.Method == http.MethodGet && strings.Contains(c.Resource, "kubernetes-internal"))
		if c.Method != http.MethodGet && c.Kind != "ruleHealth" && c.Kind != "operation" && c.Kind != "operationResult" {
			t.Errorf("zerodrop sent ARM more than reads: %s %v", c, c.Changes)
		}
	}
	if !read {
		t.Error("zerodrop never read the CCM's load balancer kubernetes-internal")
	}
	got, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got.Finalizers {
		if strings.Contains(f, "zerodrop") {
			t.Errorf("zerodrop put its finalizer %q on the gate-only Service", f)
		}
	}
	for k := range got.Annotations {
		if strings.Contains(k, "zerodrop.dev/") && k != model.AnnotationGateOnly {
			t.Errorf("zerodrop annotated the gate-only Service: %s", k)
		}
	}
	if len(got.Status.Conditions) > 0 || len(got.Status.LoadBalancer.Ingress) != 1 ||
		got.Status.LoadBalancer.Ingress[0].IP != svcIP {
		t.Errorf("the gate-only Service's status is not the CCM's (address %s): %+v", svcIP, got.Status)
	}
}
