package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
)

var azGateOnlyServices = flag.Int("azure-gate-only-n", 100, "gate-only Services for BenchmarkAzureGateOnlyRollout")

const (
	azGateNS = "azure-gate-only"
	// azGateLB is the load balancer the CCM writes (its name for an
	// internal one), which the bench seeds as the CCM leaves it.
	azGateLB = "kubernetes-internal"
	// azGateNodes are the nodes the pods run on, all in the CCM's pool.
	azGateNodes = 4
)

// BenchmarkAzureGateOnlyRollout measures the gates of gate-only Services
// (zerodrop.dev/gate-only=true: the CCM writes their load balancer, zerodrop
// reads it and writes nothing) on the ARM emulator with ARM's throttling and
// a Standard Load Balancer's limits on: -azure-gate-only-n Services with
// externalTrafficPolicy Local, one pod each, all rolled at once — a new pod
// beside the old one on its node (so its gate waits for the rule's probe Up,
// read with the rule-health operation), made Ready when its gate opens,
// then the old pod goes. The bench is the kubelet and the EndpointSlice
// controller. It reports the rule-health operations a second (peak over
// any 10 s, mean) against --azure-rule-health-qps, the reads a second
// against --azure-read-qps, the throttled answers, the writes (none is
// zerodrop's to make) and the gates' latency; it fails only when a gate
// never opens.
func BenchmarkAzureGateOnlyRollout(b *testing.B) {
	crlog.SetLogger(logr.Discard())
	n := *azGateOnlyServices
	if n < 1 || n > azurearm.StandardLBLimits.Frontends {
		b.Fatalf("-azure-gate-only-n %d: want 1 to %d (the frontends of one Standard Load Balancer)", n, azurearm.StandardLBLimits.Frontends)
	}
	rc, c := azBenchCluster(b, azGateNS)
	ctx := context.Background()
	// RecordPolls: the reads counted are every GET, the rule-health
	// operations' polls and results too.
	emu := azurearm.New(azurearm.Options{Throttle: azurearm.ARMThrottle, Limits: azurearm.StandardLBLimits, RecordPolls: true})
	emu.SetRuleHealth(azProbesUp(emu))
	if err := emu.Seed(azSub, azGroup, azCCMLB(n)); err != nil {
		b.Fatal(err)
	}
	for k := range azGateNodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: azGateNode(k)}}
		if err := c.Create(ctx, node); err != nil {
			b.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: azGateNodeIP(k)}}
		if err := c.Status().Update(ctx, node); err != nil {
			b.Fatal(err)
		}
	}
	// Each Service as the CCM left it (its address in status) and its old
	// pod Ready, its gate open.
	old := make([]*corev1.Pod, n)
	parallel(b, n, 8, func(i int) error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: azGateNS, Name: azureName(i), Annotations: map[string]string{model.AnnotationGateOnly: "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": azureName(i)},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if err := c.Create(ctx, svc); err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: azGateFrontend(i)}}
		if err := c.Status().Update(ctx, svc); err != nil {
			return err
		}
		p, err := azGatePod(ctx, c, i, "old", true)
		if err != nil {
			return err
		}
		old[i] = p
		return c.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: azGateNS, Name: azureName(i),
			Labels: map[string]string{discoveryv1.LabelServiceName: azureName(i)}}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{azGateEndpoint(i, p, true)}})
	})

	r := azChurnStart(b, rc, emu, []string{"lb-a"}, func(cfg *controller.Config) {
		cfg.Azure.GateOnlyLoadBalancers = azGateLB // the bench's subject: gate-only on
	})
	defer r.stop(b)
	select {
	case <-r.Manager.Elected():
	case <-time.After(2 * time.Minute):
		b.Fatal("the controller was not elected within 2 minutes")
	}
	if !r.Manager.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("the controller's cache never synced")
	}

	// The rollout: every Service's new pod at once, beside its old one.
	start := time.Now()
	created := make([]time.Time, n)
	var mu sync.Mutex
	parallel(b, n, 8, func(i int) error {
		p, err := azGatePod(ctx, c, i, "new", false)
		if err != nil {
			return err
		}
		if err := azGateSetEndpoints(ctx, c, i, azGateEndpoint(i, old[i], true), azGateEndpoint(i, p, false)); err != nil {
			return err
		}
		mu.Lock()
		created[i] = time.Now()
		mu.Unlock()
		return nil
	})
	fmt.Printf("created %d new pods in %s\n", n, time.Since(start).Round(time.Millisecond))
	latency := make([]time.Duration, n)
	open := 0
	for deadline := time.Now().Add(15 * time.Minute); open < n; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d gates open after 15 minutes", open, n)
		}
		time.Sleep(250 * time.Millisecond)
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(azGateNS)); err != nil {
			b.Fatal(err)
		}
		for k := range pods.Items {
			p := &pods.Items[k]
			var i int
			if _, err := fmt.Sscanf(p.Name, "svc-%04d-new", &i); err != nil || latency[i] != 0 || !azGateOpen(p) {
				continue
			}
			latency[i] = time.Since(created[i])
			open++
			// As the kubelet and the EndpointSlice controller would: the
			// new pod Ready and serving, the old one gone.
			if err := azGateReady(ctx, c, p); err != nil {
				b.Fatal(err)
			}
			if err := azGateSetEndpoints(ctx, c, i, azGateEndpoint(i, p, true)); err != nil {
				b.Fatal(err)
			}
			if err := c.Delete(ctx, old[i], client.GracePeriodSeconds(0)); err != nil {
				b.Fatal(err)
			}
		}
	}
	done := time.Now()

	calls, _ := emu.Calls(0)
	slices.SortStableFunc(calls, func(x, y azurearm.Call) int { return x.Time.Compare(y.Time) })
	roll := azCallsBetween(calls, start, done.Add(time.Millisecond))
	secs := done.Sub(start).Seconds()
	health := azMethod(roll, http.MethodPost)
	gets := azMethod(roll, http.MethodGet)
	sorted := slices.Clone(latency)
	slices.Sort(sorted)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nAzure (ARM emulator, ARM throttling and Standard Load Balancer limits on): gate-only rollout, %d Services (externalTrafficPolicy Local) on the CCM's %s, one pod each replaced beside the old one on %d nodes\n",
		n, azGateLB, azGateNodes)
	fmt.Fprintln(w, flagsLine(r.flags))
	fmt.Fprintf(w, "rollout\t%s from the first new pod to the last gate open; gate latency median %s, 90th %s, max %s\n",
		done.Sub(start).Round(time.Millisecond), sorted[n/2].Round(time.Millisecond), sorted[n*9/10].Round(time.Millisecond), sorted[n-1].Round(time.Millisecond))
	fmt.Fprintf(w, "rule-health operations (POST)\t%d; peak %.2f/s over %s, mean %.2f/s (--azure-rule-health-qps %g, --azure-rule-health-burst %d)\n",
		len(health), azPeak(health, azWindow), azWindow, float64(len(health))/secs, r.cfg.Azure.RuleHealthQPS, r.cfg.Azure.RuleHealthBurst)
	fmt.Fprintf(w, "reads (GET, the operations' polls and results included)\t%d (%s); peak %.2f/s over %s, mean %.2f/s; beyond the budget's bucket (--azure-read-qps %g, --azure-read-burst %d) over any interval: %.1f\n",
		len(gets), azByKind(gets), azPeak(gets, azWindow), azWindow, float64(len(gets))/secs, r.cfg.Azure.Read.QPS, r.cfg.Azure.Read.Burst,
		azBeyondBucket(gets, r.cfg.Azure.Read.QPS, r.cfg.Azure.Read.Burst))
	fmt.Fprintf(w, "ARM's writes (PUT, PATCH, POST, DELETE)\t%d (%s); peak %.2f/s over %s\n", len(azWrites(roll)), azByKind(azWrites(roll)), azPeak(azWrites(roll), azWindow), azWindow)
	fmt.Fprintf(w, "throttled (429)\t%s\n", azThrottled(roll))
	fmt.Fprintf(w, "other errors\t%s\n", azErrors(roll))
	w.Flush()
	for _, call := range roll {
		if call.Method != http.MethodGet && call.Method != http.MethodPost {
			b.Errorf("zerodrop wrote to ARM for gate-only Services: %s", call)
		}
	}
	b.ReportMetric(azPeak(health, azWindow), "peak-rule-health/s")
	b.ReportMetric(azPeak(gets, azWindow), "peak-reads/s")
	b.ReportMetric(float64(len(azStatus(roll, http.StatusTooManyRequests))), "throttled")
	b.ReportMetric(done.Sub(start).Seconds(), "rollout-s")
}

func azGateNode(k int) string   { return fmt.Sprintf("gate-node-%d", k) }
func azGateNodeIP(k int) string { return fmt.Sprintf("10.0.1.%d", 4+k) }

// azGateFrontend is Service i's address on the CCM's load balancer.
func azGateFrontend(i int) string { return fmt.Sprintf("127.240.%d.%d", 1+i/250, 1+i%250) }

// azGatePod creates Service i's pod of generation gen ("old", "new") on its
// node with the readiness gate, as the kubelet reports it: running, its
// containers ready, and Ready with its gate open when ready is true.
func azGatePod(ctx context.Context, c client.Client, i int, gen string, ready bool) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: azGateNS, Name: azureName(i) + "-" + gen, Labels: map[string]string{"app": azureName(i)}},
		Spec: corev1.PodSpec{NodeName: azGateNode(i % azGateNodes), Containers: []corev1.Container{{Name: "app", Image: "app"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}}}
	if err := c.Create(ctx, p); err != nil {
		return nil, err
	}
	ip := fmt.Sprintf("10.%d.%d.%d", 200+i/250, i%250, map[string]int{"old": 1, "new": 2}[gen])
	now := metav1.Now()
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: podgate.ConditionType, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: now})
	if err := c.Status().Update(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// azGateOpen: the pod's readiness gate is True.
func azGateOpen(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == podgate.ConditionType {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// azGateReady sets the pod Ready, as the kubelet does once every readiness
// gate is True.
func azGateReady(ctx context.Context, c client.Client, p *corev1.Pod) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		for k := range cur.Status.Conditions {
			if cur.Status.Conditions[k].Type == corev1.PodReady {
				cur.Status.Conditions[k].Status, cur.Status.Conditions[k].LastTransitionTime = corev1.ConditionTrue, metav1.Now()
			}
		}
		return c.Status().Update(ctx, &cur)
	})
}

func azGateEndpoint(i int, p *corev1.Pod, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, NodeName: ptr.To(p.Spec.NodeName),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)}}
}

// azGateSetEndpoints replaces Service i's endpoints, as the EndpointSlice
// controller would, in one merge patch.
func azGateSetEndpoints(ctx context.Context, c client.Client, i int, eps ...discoveryv1.Endpoint) error {
	patch, err := json.Marshal(map[string]any{"endpoints": eps})
	if err != nil {
		return err
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: azGateNS, Name: azureName(i)}}
	return c.Patch(ctx, sl, client.RawPatch(types.MergePatchType, patch))
}

// azCCMLB is the load balancer cloud-provider-azure writes for n internal
// Services of one port: a frontend, a probe (kube-proxy's health-check node
// port, HTTP) and a rule each, every rule on the one nodeIP pool of the
// nodes. The names are the CCM's pattern ("a<uid>-TCP-80"), which zerodrop
// does not read: it finds a rule by its frontend.
func azCCMLB(n int) armnetwork.LoadBalancer {
	id := "/subscriptions/" + azSub + "/resourceGroups/" + azGroup + "/providers/Microsoft.Network/loadBalancers/" + azGateLB
	ref := func(kind, child string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to.Ptr(id + "/" + kind + "/" + child)}
	}
	pool := &armnetwork.BackendAddressPool{Name: to.Ptr("kubernetes"), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{
		VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(azVNet)}}}
	for k := range azGateNodes {
		pool.Properties.LoadBalancerBackendAddresses = append(pool.Properties.LoadBalancerBackendAddresses,
			&armnetwork.LoadBalancerBackendAddress{Name: to.Ptr(azGateNode(k)), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{
				IPAddress: to.Ptr(azGateNodeIP(k))}})
	}
	p := &armnetwork.LoadBalancerPropertiesFormat{BackendAddressPools: []*armnetwork.BackendAddressPool{pool}}
	for i := range n {
		fe := fmt.Sprintf("a%031x", i)
		rule := fe + "-TCP-80"
		p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr(fe),
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(azSubnet)},
				PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic), PrivateIPAddress: to.Ptr(azGateFrontend(i))}})
		p.Probes = append(p.Probes, &armnetwork.Probe{Name: to.Ptr(rule), Properties: &armnetwork.ProbePropertiesFormat{
			Protocol: to.Ptr(armnetwork.ProbeProtocolHTTP), Port: to.Ptr(int32(30000 + i)), RequestPath: to.Ptr("/healthz"),
			IntervalInSeconds: to.Ptr[int32](5), ProbeThreshold: to.Ptr[int32](2)}})
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(rule),
			Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](80), BackendPort: to.Ptr[int32](80),
				EnableFloatingIP: to.Ptr(true), IdleTimeoutInMinutes: to.Ptr[int32](4), EnableTCPReset: to.Ptr(true),
				FrontendIPConfiguration: ref("frontendIPConfigurations", fe), BackendAddressPool: ref("backendAddressPools", "kubernetes"),
				Probe: ref("probes", rule)}})
	}
	return armnetwork.LoadBalancer{Name: to.Ptr(azGateLB), Location: to.Ptr("westeurope"),
		SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)}, Properties: p}
}
