package azuredp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/testutil/netlabtest"
)

// The tests' world: a netlab fabric with a load-balancer host, two client
// hosts and three backend hosts serving HTTP, and an emulator whose
// frontends come from the fabric's range (clients reach them by ARP, as
// the lab's HAProxy frontends).

const (
	sub    = "sub-1"
	rg     = "rg-1"
	lbName = "kubernetes-internal"
	subnet = "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
	vip    = "198.18.200.1"
	// fipPort is the floating-IP rule's port (backend port the same);
	// natPort the other rule's, DNATed to natBackendPort.
	fipPort, natPort, natBackendPort = 80, 81, 8080
	healthPort                       = 10256
)

var fabricVIPs = netip.MustParsePrefix("198.18.200.0/24")

// world is the topology of one test.
type world struct {
	lab      *netlab.Lab
	lb       *netlab.Host
	fipCli   *netlab.Host // answered directly by the backends (floating IP)
	natCli   *netlab.Host // whose answers the backends route through lb (DNAT)
	backends []*server
	emu      *azurearm.Emulator
	lbs      *armnetwork.LoadBalancersClient
	pools    *armnetwork.LoadBalancerBackendAddressPoolsClient
}

// server is one backend host: HTTP on the floating-IP port (the frontend
// address is on its lo), on the DNAT backend port, and a health endpoint
// whose answer the test switches.
type server struct {
	name    string
	host    *netlab.Host
	healthy atomic.Bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	l := netlabtest.NewLab(t)
	w := &world{lab: l, emu: azurearm.New(azurearm.Options{AddressPrefix: fabricVIPs})}
	host := func(name string) *netlab.Host { return netlabtest.AddHost(t, l, name) }
	w.lb, w.fipCli, w.natCli = host("lb"), host("fipcli"), host("natcli")
	for i := 1; i <= 3; i++ {
		s := &server{name: fmt.Sprintf("b%d", i), host: host(fmt.Sprintf("b%d", i))}
		s.healthy.Store(true)
		w.serve(t, s)
		w.backends = append(w.backends, s)
	}
	f, err := armnetwork.NewClientFactory(sub, w.emu.Credential(), w.emu.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	w.lbs, w.pools = f.NewLoadBalancersClient(), f.NewLoadBalancerBackendAddressPoolsClient()
	return w
}

// serve sets a backend host up as a floating-IP backend is (the frontend
// address on lo, not answering ARP for it: load-balancer-floating-ip's
// guest OS configuration) and serves HTTP from this process.
func (w *world) serve(t *testing.T, s *server) {
	t.Helper()
	ctx := context.Background()
	for _, kv := range [][2]string{{"net.ipv4.conf.all.arp_ignore", "1"}, {"net.ipv4.conf.all.arp_announce", "2"}} {
		if err := s.host.SetSysctl(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.host.Run(ctx, "ip", "addr", "add", vip+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	// DNAT's answers go back through lb to be translated (Azure does that
	// on the backend's host): the DNAT client is routed through it.
	if err := s.host.Run(ctx, "ip", "route", "add", w.natCli.IP.String()+"/32", "via", w.lb.IP.String()); err != nil {
		t.Fatal(err)
	}
	netlabtest.ServeNamed(t, s.host, s.name, &s.healthy, fipPort, natBackendPort, healthPort)
}

// lbDoc is a load balancer as cloud-provider-azure writes one: an internal
// frontend, a pool of the backends' addresses, an HTTP probe (interval 5 s,
// run every second: Config.ProbeScale) and two rules, floating IP on and off.
func (w *world) lbDoc(members []*server, admin map[string]armnetwork.LoadBalancerBackendAddressAdminState) armnetwork.LoadBalancer {
	id := "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/loadBalancers/" + lbName
	ref := func(kind, name string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to.Ptr(id + "/" + kind + "/" + name)}
	}
	rule := func(name string, port, backendPort int32, floating bool) *armnetwork.LoadBalancingRule {
		return &armnetwork.LoadBalancingRule{Name: to.Ptr(name), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(port), BackendPort: to.Ptr(backendPort),
			EnableFloatingIP: to.Ptr(floating), IdleTimeoutInMinutes: to.Ptr[int32](4),
			FrontendIPConfiguration: ref("frontendIPConfigurations", "fe"), BackendAddressPool: ref("backendAddressPools", "pool"),
			Probe: ref("probes", "health")}}
	}
	return armnetwork.LoadBalancer{Location: to.Ptr("westeurope"), Properties: &armnetwork.LoadBalancerPropertiesFormat{
		FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"),
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)},
				PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic), PrivateIPAddress: to.Ptr(vip)}}},
		BackendAddressPools: []*armnetwork.BackendAddressPool{w.pool(members, admin)},
		Probes: []*armnetwork.Probe{{Name: to.Ptr("health"), Properties: &armnetwork.ProbePropertiesFormat{
			Protocol: to.Ptr(armnetwork.ProbeProtocolHTTP), Port: to.Ptr[int32](healthPort), RequestPath: to.Ptr("/healthz"),
			IntervalInSeconds: to.Ptr[int32](5), ProbeThreshold: to.Ptr[int32](2)}}},
		LoadBalancingRules: []*armnetwork.LoadBalancingRule{rule("fip", fipPort, fipPort, true), rule("nat", natPort, natBackendPort, false)},
	}}
}

func (w *world) pool(members []*server, admin map[string]armnetwork.LoadBalancerBackendAddressAdminState) *armnetwork.BackendAddressPool {
	p := &armnetwork.BackendAddressPool{Name: to.Ptr("pool"), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{}}
	for _, s := range members {
		props := &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr(s.host.IP.String()),
			VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr("/vnet")}}
		if a, ok := admin[s.name]; ok {
			props.AdminState = to.Ptr(a)
		}
		p.Properties.LoadBalancerBackendAddresses = append(p.Properties.LoadBalancerBackendAddresses,
			&armnetwork.LoadBalancerBackendAddress{Name: to.Ptr(s.name), Properties: props})
	}
	return p
}

// putLB writes the load balancer as a writer would, through ARM's API.
func (w *world) putLB(t *testing.T, lb armnetwork.LoadBalancer) {
	t.Helper()
	ctx := context.Background()
	poller, err := w.lbs.BeginCreateOrUpdate(ctx, rg, lbName, lb, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
	}
	if err != nil {
		t.Fatalf("put load balancer: %v", err)
	}
}

// putPool replaces the pool, the cheap write an endpoint change makes.
func (w *world) putPool(t *testing.T, members []*server, admin map[string]armnetwork.LoadBalancerBackendAddressAdminState) {
	t.Helper()
	ctx := context.Background()
	poller, err := w.pools.BeginCreateOrUpdate(ctx, rg, lbName, "pool", *w.pool(members, admin), nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
	}
	if err != nil {
		t.Fatalf("put pool: %v", err)
	}
}

func (w *world) start(t *testing.T, propagation time.Duration) *DataPlane {
	t.Helper()
	dp, err := New(context.Background(), Config{NS: w.lb.Netns, Emulator: w.emu, ResourceGroup: rg, Propagation: propagation, ProbeScale: 0.2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("data plane close: %v", err)
		}
	})
	return dp
}

type conn = netlabtest.Conn

func feAddr(port int) string { return net.JoinHostPort(vip, strconv.Itoa(port)) }

// dial opens a connection from cli to the frontend's port; a frontend
// that sends the SYN nowhere fails it within the timeout.
func dial(cli *netlab.Host, port int, timeout time.Duration) (*conn, error) {
	return netlabtest.Dial(cli, feAddr(port), timeout)
}

// dialFrom opens a connection from cli's local port to the frontend's
// port (SO_REUSEADDR: the port may have just been used).
func dialFrom(cli *netlab.Host, local, port int) (*conn, error) {
	return netlabtest.DialFrom(cli, local, feAddr(port))
}

// serverNamed is the backend named name.
func (w *world) serverNamed(name string) *server {
	for _, b := range w.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}

// spread opens n fresh connections and counts the backends that answer
// each; a connection that cannot be opened counts as "".
func spread(t *testing.T, cli *netlab.Host, port, n int) map[string]int {
	t.Helper()
	return spreadWithin(t, cli, port, n, 3*time.Second)
}

// spreadWithin is spread with a dial timeout: short where no connection
// is to be opened (a slow machine only makes such a check pass, never fail
// wrongly).
func spreadWithin(t *testing.T, cli *netlab.Host, port, n int, timeout time.Duration) map[string]int {
	t.Helper()
	return netlabtest.Spread(t, cli, feAddr(port), n, timeout)
}

// connTo opens connections until one lands on the named backend, and
// returns it open (the others are closed).
func connTo(t *testing.T, cli *netlab.Host, port int, name string) *conn {
	t.Helper()
	return netlabtest.ConnTo(t, cli, feAddr(port), name)
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	netlabtest.WaitFor(t, what, 30*time.Second, cond)
}

// waitEligible waits until the rule's eligible backends are exactly names.
func (w *world) waitEligible(t *testing.T, dp *DataPlane, rule string, names ...string) {
	t.Helper()
	byAddr := map[netip.Addr]string{}
	for _, s := range w.backends {
		byAddr[s.host.IP] = s.name
	}
	waitFor(t, "rule "+rule+" eligible "+strings.Join(names, ","), func() error {
		bs, err := dp.Health(lbName, rule)
		if err != nil {
			return err
		}
		var got []string
		for _, b := range bs {
			if b.Eligible {
				got = append(got, byAddr[b.Addr])
			}
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			return errors.New("eligible: " + strings.Join(got, ","))
		}
		return nil
	})
}
