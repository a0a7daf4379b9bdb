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
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

const (
	sub   = "00000000-0000-0000-0000-00000000000a"
	group = "rg-cluster"
)

// world is ccm.World with the Services this test makes.
type world struct{ *ccm.World }

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{ccm.NewWorld(t, ccm.Resources{SubscriptionID: sub, ResourceGroup: group, Location: "westeurope",
		VNet: "vnet", Subnet: "nodes", SecurityGroup: "nsg"})}
	w.Base.LeaseNamespace = "kube-system"
	return w
}

func (w *world) service(t *testing.T, name string, internal bool) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if internal {
		svc.Annotations = map[string]string{"service.beta.kubernetes.io/azure-load-balancer-internal": "true"}
	}
	if _, err := w.CS.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRealCCM runs the real cloud-controller-manager of cloud-provider-azure
// against the emulator: two Services of type LoadBalancer, one internal and
// one public, get their rules, probes, pool and addresses; the CCM is then
// restarted and the new leader's sync is checked in the emulator's record.
// Any way in which the emulator departs from ARM that this client notices
// (a route, an api-version, a field it sends and reads back, the
// long-running operations, the token or metadata endpoints) fails it.
func TestRealCCM(t *testing.T) {
	w := newWorld(t)
	w.Node(t, "node-1", "10.1.0.4", nil)
	w.Node(t, "node-2", "10.1.0.5", nil)
	stop := w.Start(t, "ccm-1")
	w.service(t, "web", true)
	w.service(t, "api", false)
	internalIP, publicIP := w.Ingress(t, "default", "web", 3*time.Minute), w.Ingress(t, "default", "api", 3*time.Minute)

	// What the CCM wrote is what the emulator stores and what the Services
	// report.
	ilb, ok := w.Emu.LoadBalancer(group, "kubernetes-internal")
	if !ok {
		t.Fatal("no internal load balancer kubernetes-internal")
	}
	checkLB(t, ilb, internalIP, []string{"10.1.0.4", "10.1.0.5"})
	if _, ok := w.Emu.LoadBalancer(group, "kubernetes"); !ok {
		t.Fatal("no public load balancer kubernetes")
	}
	if a, err := netip.ParseAddr(publicIP); err != nil || !netip.MustParsePrefix("203.0.113.0/24").Contains(a) {
		t.Errorf("public Service address %q, want one of the emulator's public IP addresses", publicIP)
	}
	calls, mark := w.Emu.Calls(0)
	checkFirstSync(t, calls)
	if c := w.Emu.Counters(); c.Polls == 0 || c.Tokens == 0 {
		t.Errorf("counters %+v: want long-running operations polled and a token issued", c)
	}

	// A restart with nothing changed: the new leader syncs every Service.
	stop()
	w.Start(t, "ccm-2")
	eventually(t, 3*time.Minute, "ccm-2 has synced both Services", func() error {
		for _, name := range []string{"web", "api"} {
			// The service controller reports every sync it finishes; ccm-1
			// reported the first.
			if n := w.ensured(t, name); n < 2 {
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
	checkLB(t, ilb2, internalIP, []string{"10.1.0.4", "10.1.0.5"})
}

// ensured counts the syncs the service controller reported as finished for
// a Service.
func (w *world) ensured(t *testing.T, name string) int32 {
	t.Helper()
	evs, err := w.CS.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
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

func checkFirstSync(t *testing.T, calls []azurearm.Call) {
	t.Helper()
	var lbPut, poolPut *azurearm.Call
	for i, c := range calls {
		if c.Status >= 400 {
			t.Errorf("refused: %s", c)
		}
		switch {
		case c.Client != "ccm-1":
			t.Errorf("call from %q, want every call from ccm-1's identity: %s", c.Client, c)
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
	if poolPut == nil || !slices.ContainsFunc(poolPut.Changes, func(s string) bool { return strings.Contains(s, `"10.1.0.4"`) }) {
		t.Errorf("first pool PUT %+v: want the nodes' addresses added", poolPut)
	}
}

// checkLB: one frontend at addr, one TCP rule 80 through a probe, a pool of
// the node addresses.
func checkLB(t *testing.T, lb *armnetworkLB, addr string, nodes []string) {
	t.Helper()
	p := lb.Properties
	if len(p.FrontendIPConfigurations) != 1 || str(p.FrontendIPConfigurations[0].Properties.PrivateIPAddress) != addr {
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
