package ccm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/emulated/azurecompute"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/testutil/ccmworld"
)

const (
	sub   = "00000000-0000-0000-0000-00000000000a"
	group = "rg-cluster"
)

// world is ccmworld.World with the Services this test makes and the compute
// side of the case's emulator, if it has one.
type world struct {
	*ccmworld.World
	cmp *azurecompute.Compute
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return &world{World: ccmworld.New(t, ccm.Resources{SubscriptionID: sub, ResourceGroup: group, Location: "westeurope",
		VNet: "vnet", Subnet: "nodes", SecurityGroup: "nsg"})}
}

func (w *world) service(t *testing.T, ns, name string, internal bool) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if internal {
		svc.Annotations = map[string]string{"service.beta.kubernetes.io/azure-load-balancer-internal": "true"}
	}
	if _, err := w.CS.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRealCCM runs the real cloud-controller-manager of cloud-provider-azure
// against the emulator, in the three configurations clusters run it with
// (configs_test.go): pools of node IPs, and pools of NIC ipconfigs on scale
// sets (azure.json's defaults) and on availability sets. In each, two
// Services of type LoadBalancer, one internal and one public, get their
// rules, probes, pool members and addresses; the CCM is then restarted and
// the new leader's sync is checked in the emulator's record. Any way in
// which the emulator departs from ARM that this client notices (a route,
// an api-version, a field it sends and reads back, the long-running
// operations, the token or metadata endpoints) fails it. The cases share
// one control plane, each with an Azure (emulator) and a namespace of its
// own, one after the other.
func TestRealCCM(t *testing.T) {
	w := newWorld(t)
	for _, c := range ccmCases() {
		if !t.Run(c.name, func(t *testing.T) { w.run(t, c) }) {
			return
		}
	}
}

// run is one configuration's case: its machines and nodes, a first sync,
// then a restart with nothing changed.
func (w *world) run(t *testing.T, c ccmCase) {
	ns := c.name
	w.NewEmulator(t)
	w.cmp = nil
	w.Base.Extra = c.extra
	// The Lease in the case's namespace: a case does not wait for the
	// previous case's leader's lease to end.
	w.Base.LeaseNamespace = ns
	// The restart's new leader waits for the stopped one's Lease to end.
	w.Base.LeaseDuration = 5 * time.Second
	if _, err := w.CS.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.clear(t, ns) }) // after the CCMs stop (cleanups run last first)
	c.setup(t, w)
	first, second := ns+"-ccm-1", ns+"-ccm-2"
	stop := w.Start(t, first)
	w.service(t, ns, "web", true)
	w.service(t, ns, "api", false)
	internalIP, publicIP := w.Ingress(t, ns, "web", 3*time.Minute), w.Ingress(t, ns, "api", 3*time.Minute)

	// What the CCM wrote is what the emulator stores and what the Services
	// report.
	ilb, ok := w.Emu.LoadBalancer(group, "kubernetes-internal")
	if !ok {
		t.Fatal("no internal load balancer kubernetes-internal")
	}
	checkLB(t, ilb, internalIP, c.poolIPs)
	plb, ok := w.Emu.LoadBalancer(group, "kubernetes")
	if !ok {
		t.Fatal("no public load balancer kubernetes")
	}
	checkLB(t, plb, "", c.poolIPs)
	if a, err := netip.ParseAddr(publicIP); err != nil || !netip.MustParsePrefix("203.0.113.0/24").Contains(a) {
		t.Errorf("public Service address %q, want one of the emulator's public IP addresses", publicIP)
	}
	c.checkPools(t, w)
	calls, mark := w.Emu.Calls(0)
	for _, c := range calls {
		if c.Write() {
			t.Logf("first sync: %s %v", c, c.Changes)
		}
	}
	checkFirstSync(t, calls, first, c.poolIPs)
	if c := w.Emu.Counters(); c.Polls == 0 || c.Tokens == 0 {
		t.Errorf("counters %+v: want long-running operations polled and a token issued", c)
	}

	// A restart with nothing changed: the new leader syncs every Service.
	stop()
	w.Start(t, second)
	eventually(t, 3*time.Minute, second+" has synced both Services", func() error {
		for _, name := range []string{"web", "api"} {
			// The service controller reports every sync it finishes; the
			// first leader reported the first.
			if n := w.ensured(t, ns, name); n < 2 {
				return fmt.Errorf("%s: %d EnsuredLoadBalancer events", name, n)
			}
		}
		return nil
	})
	// cloud-provider-azure compares before it writes: with nothing changed
	// and an emulator that stores and returns what it was sent, the new
	// leader writes nothing. A field the emulator dropped or altered would
	// read back different and be written again here.
	after, _ := w.Emu.Calls(mark)
	for _, c := range after {
		t.Logf("after the restart: %s", c)
		if c.Status >= 400 {
			t.Errorf("after the restart, refused: %s", c)
		}
		if c.Method == http.MethodPut || c.Method == http.MethodDelete {
			t.Errorf("after the restart with nothing changed, a write: %s %v", c, c.Changes)
		}
	}
	ilb2, _ := w.Emu.LoadBalancer(group, "kubernetes-internal")
	checkLB(t, ilb2, internalIP, c.poolIPs)
	c.checkPools(t, w)
}

// clear deletes a case's Services (their load-balancer finalizer dropped:
// no CCM runs any more) and every node, so that the next case's CCM sees
// only its own.
func (w *world) clear(t *testing.T, ns string) {
	ctx := context.Background()
	svcs, err := w.CS.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("clear %s: %v", ns, err)
		return
	}
	for _, s := range svcs.Items {
		s.Finalizers = nil
		if _, err := w.CS.CoreV1().Services(ns).Update(ctx, &s, metav1.UpdateOptions{}); err != nil {
			t.Errorf("clear %s/%s: %v", ns, s.Name, err)
		}
		if err := w.CS.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("clear %s/%s: %v", ns, s.Name, err)
		}
	}
	if err := w.CS.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("clear nodes: %v", err)
	}
}

// ensured counts the syncs the service controller reported as finished for
// a Service.
func (w *world) ensured(t *testing.T, ns, name string) int32 {
	t.Helper()
	evs, err := w.CS.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=EnsuredLoadBalancer"})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range evs.Items {
		n += max(e.Count, 1)
	}
	return n
}

// checkFirstSync: every call from the first leader and accepted, a rule
// for port 80 in a load-balancer PUT, and with pools of node IPs
// (poolIPs), a pool PUT adding them.
func checkFirstSync(t *testing.T, calls []azurearm.Call, identity string, poolIPs []string) {
	t.Helper()
	var lbPut, poolPut *azurearm.Call
	for i, c := range calls {
		if c.Status >= 400 {
			t.Errorf("refused: %s", c)
		}
		switch {
		case c.Client != identity:
			t.Errorf("call from %q, want every call from %s's identity: %s", c.Client, identity, c)
		case c.Kind == "loadBalancer" && c.Method == http.MethodPut && lbPut == nil:
			lbPut = &calls[i]
		case c.Kind == "backendAddressPool" && c.Method == http.MethodPut && poolPut == nil:
			poolPut = &calls[i]
		}
	}
	if lbPut == nil || lbPut.APIVersion != "2025-05-01" || !slices.ContainsFunc(lbPut.Changes, func(s string) bool {
		return strings.Contains(s, "loadBalancingRules[") && strings.HasSuffix(s, ".properties.frontendPort = 80")
	}) {
		t.Errorf("first load-balancer PUT %+v: want armnetwork v9's api-version and a rule for port 80", lbPut)
	}
	if len(poolIPs) > 0 && (poolPut == nil || !slices.ContainsFunc(poolPut.Changes, func(s string) bool { return strings.Contains(s, `"`+poolIPs[0]+`"`) })) {
		t.Errorf("first pool PUT %+v: want the nodes' addresses added", poolPut)
	}
}

// checkLB: one frontend (at the private address addr, unless ""), one TCP
// rule 80 through a probe, a pool whose addresses are nodes (none for a
// pool of NIC ipconfigs: an address with ipAddress would make the CCM take
// the pool for one of node IPs, azure_loadbalancer_backendpool.go 118-134
// at v1.36.3).
func checkLB(t *testing.T, lb *armnetworkLB, addr string, nodes []string) {
	t.Helper()
	p := lb.Properties
	if len(p.FrontendIPConfigurations) != 1 || (addr != "" && str(p.FrontendIPConfigurations[0].Properties.PrivateIPAddress) != addr) {
		t.Errorf("frontends %s, want one at %s", dump(p.FrontendIPConfigurations), addr)
	}
	if len(p.LoadBalancingRules) != 1 || *p.LoadBalancingRules[0].Properties.FrontendPort != 80 ||
		p.LoadBalancingRules[0].Properties.Probe == nil || len(p.Probes) != 1 {
		t.Errorf("rules %s probes %s, want one rule for port 80 with its probe", dump(p.LoadBalancingRules), dump(p.Probes))
	}
	var got []string
	for _, pool := range p.BackendAddressPools {
		for _, a := range pool.Properties.LoadBalancerBackendAddresses {
			got = append(got, str(a.Properties.IPAddress))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, nodes) {
		t.Errorf("pool addresses %v, want the nodes' %v", got, nodes)
	}
}

func eventually(t *testing.T, bound time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, bound, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
