package azure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestCreateObserveNoop: a created load balancer reads back as what was
// asked, addresses assigned by Azure; a fresh provider (a restart) then
// finds nothing to write.
func TestCreateObserveNoop(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "web", 80, backends(8080, "10.0.0.1", "10.0.0.2")...),
		listener("default", "web", 443, backends(8443, "10.0.0.1", "10.0.0.2")...),
		listener("shop", "api", 80, backends(9000, "10.0.1.1")...),
	}}
	plans := converge(t, p, want)
	if len(plans) != 1 || !plans[0].Create {
		t.Fatalf("plans = %v, want one create", plans)
	}
	lb, _ := emu.LoadBalancer(group, "lb-a")
	if lb.Tags[azure.TagOwner] == nil || lb.Tags[azure.TagCreated] == nil {
		t.Errorf("tags = %v, want owner and created", lb.Tags)
	}
	obs, err := p.Observe(context.Background(), "lb-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range obs.Listeners {
		if !strings.HasPrefix(l.Address, "127.240.") {
			t.Errorf("listener %s address %q, want one assigned from the emulator's prefix", l.Name, l.Address)
		}
	}
	if a, b := obs.Listeners[0].Address, obs.Listeners[1].Address; a != b {
		t.Errorf("two ports of one Service got two frontends: %s, %s", a, b)
	}
	before := emu.Counters()
	restarted := newProvider(t, emu, provider.Hooks{})
	if plans := converge(t, restarted, want); len(plans) != 0 {
		t.Errorf("restart planned %v", plans)
	}
	if d := emu.Counters().Sub(before); d.Puts()+d.Deletes != 0 || d.Gets != 2 {
		t.Errorf("restart: %+v, want 2 GETs (New, Observe) and no write", d)
	}
}

// TestBackendChangeIsOnePoolPut: endpoint churn is a pool PUT; frontends,
// rules and probes stay untouched.
func TestBackendChangeIsOnePoolPut(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	var writes []string
	p := newProvider(t, emu, provider.Hooks{Write: func(op string) { writes = append(writes, op) }})
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "web", 80, backends(8080, "10.0.0.1", "10.0.0.2")...),
		listener("default", "other", 80, backends(8080, "10.0.9.1")...),
	}}
	converge(t, p, want)
	writes = nil
	want.Listeners[0].Backends = backends(8080, "10.0.0.2", "10.0.0.3")
	want.Listeners[0].Backends[0].State = model.Draining
	converge(t, p, want)
	if strings.Join(writes, ",") != "put-pool" {
		t.Fatalf("writes = %v, want one put-pool", writes)
	}
	obs, _ := p.Observe(context.Background(), "lb-a")
	got := obs.Listener(want.Listeners[0].Name).Backends
	if len(got) != 2 || got[0].State != model.Draining || got[0].Weight != 0 || got[1].State != model.Active {
		t.Errorf("backends = %+v, want 10.0.0.2 draining, 10.0.0.3 active", got)
	}
	lb, _ := emu.LoadBalancer(group, "lb-a")
	for _, pool := range lb.Properties.BackendAddressPools {
		for _, a := range pool.Properties.LoadBalancerBackendAddresses {
			if *a.Properties.IPAddress == "10.0.0.2" && *a.Properties.AdminState != armnetwork.LoadBalancerBackendAddressAdminStateDown {
				t.Errorf("draining backend has admin state %s, want Down", *a.Properties.AdminState)
			}
		}
	}
}

// TestNodeModePools: node-mode Cluster Services with the same backends (every
// ready node) share one pool zd-shared.<n>, so a new node is one pool write
// for all of them; a node-mode Local Service (HTTP probe on
// healthCheckNodePort) keeps its own pool zd-<ns>.<name>, never shared, and
// a new node then changes several pools: one load balancer PUT. A restart
// reads the layout back and writes nothing.
func TestNodeModePools(t *testing.T) {
	localProbe := model.Probe{Kind: model.ProbeHTTP, Port: 32000, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3}
	type svc struct {
		name  string
		local bool
	}
	for _, tc := range []struct {
		name      string
		svcs      []svc
		pools     map[string]string // Service name → pool of its rule
		nodeWrite string            // the writes for a new node
	}{{
		name:      "two Cluster Services share",
		svcs:      []svc{{"a", false}, {"b", false}},
		pools:     map[string]string{"a": "zd-shared.0", "b": "zd-shared.0"},
		nodeWrite: "put-pool",
	}, {
		name:      "a Local Service alone keeps its pool",
		svcs:      []svc{{"local", true}},
		pools:     map[string]string{"local": "zd-default.local"},
		nodeWrite: "put-pool",
	}, {
		name:      "a Local Service is not shared with Cluster Services",
		svcs:      []svc{{"local", true}, {"cluster", false}, {"cluster2", false}},
		pools:     map[string]string{"local": "zd-default.local", "cluster": "zd-shared.0", "cluster2": "zd-shared.0"},
		nodeWrite: "put-lb",
	}, {
		name:      "two Local Services keep a pool each",
		svcs:      []svc{{"l1", true}, {"l2", true}, {"cluster", false}},
		pools:     map[string]string{"l1": "zd-default.l1", "l2": "zd-default.l2", "cluster": "zd-default.cluster"},
		nodeWrite: "put-lb",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			emu := azurearm.New(azurearm.Options{})
			var writes []string
			p := newProvider(t, emu, provider.Hooks{Write: func(op string) { writes = append(writes, op) }})
			want := &model.LoadBalancer{Key: "lb-a"}
			setNodes := func(n int) {
				want.Listeners = nil
				for i, s := range tc.svcs {
					l := listener("default", s.name, 80, backends(int32(30001+i), addrs("10.240.0", n)...)...)
					if s.local {
						l.Probe = localProbe
						l.Probe.Port += int32(i)
					}
					want.Listeners = append(want.Listeners, l)
				}
			}
			checkPools := func(when string) {
				t.Helper()
				lb, _ := emu.LoadBalancer(group, "lb-a")
				got := map[string]string{}
				for _, r := range lb.Properties.LoadBalancingRules {
					id := *r.Properties.BackendAddressPool.ID
					got[strings.TrimSuffix(strings.TrimPrefix(*r.Name, "zd-default."), ".tcp-80")] = id[strings.LastIndexByte(id, '/')+1:]
				}
				distinct := map[string]bool{}
				for _, name := range tc.pools {
					distinct[name] = true
				}
				if len(got) != len(tc.pools) || len(lb.Properties.BackendAddressPools) != len(distinct) {
					t.Fatalf("%s: rules' pools %v and %d pools, want %v", when, got, len(lb.Properties.BackendAddressPools), tc.pools)
				}
				for s, pool := range tc.pools {
					if !strings.EqualFold(got[s], pool) {
						t.Errorf("%s: %s uses pool %q, want %q", when, s, got[s], pool)
					}
				}
			}
			setNodes(3)
			converge(t, p, want)
			checkPools("created")

			writes = nil
			setNodes(4)
			converge(t, p, want)
			if strings.Join(writes, ",") != tc.nodeWrite {
				t.Fatalf("a new node: writes = %v, want %s", writes, tc.nodeWrite)
			}
			checkPools("after a new node")
			obs, _ := p.Observe(context.Background(), "lb-a")
			for _, l := range want.Listeners {
				if o := obs.Listener(l.Name); o == nil || o.Probe != l.Probe || len(o.Backends) != 4 {
					t.Errorf("%s read back as %+v, want probe %+v and 4 nodes", l.Name, o, l.Probe)
				}
			}

			before := emu.Counters()
			restarted := newProvider(t, emu, provider.Hooks{})
			if plans := converge(t, restarted, want); len(plans) != 0 {
				t.Errorf("restart planned %v", plans)
			}
			if d := emu.Counters().Sub(before); d.Puts()+d.Deletes != 0 {
				t.Errorf("restart: %+v, want no write", d)
			}
		})
	}
}

// TestConflictIsErrConflict: a write after someone else's is refused with
// 412 and reported as provider.ErrConflict, and nothing changes.
func TestConflictIsErrConflict(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	ctx := context.Background()
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}}
	converge(t, p, want)
	for _, tc := range []struct {
		name   string
		change func(l *model.Listener)
	}{
		{"pool", func(l *model.Listener) { l.Backends = backends(8080, "10.0.0.9") }},
		{"load balancer", func(l *model.Listener) { l.Port = 81 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, err := p.Observe(ctx, "lb-a")
			if err != nil {
				t.Fatal(err)
			}
			next := fill(want, obs)
			tc.change(&next.Listeners[0])
			plan := model.Diff(obs, next)
			emu.Touch(group, "lb-a") // another writer
			before, _ := emu.LoadBalancer(group, "lb-a")
			err = p.Apply(ctx, plan)
			if !errors.Is(err, provider.ErrConflict) {
				t.Fatalf("err = %v, want ErrConflict", err)
			}
			after, _ := emu.LoadBalancer(group, "lb-a")
			if *after.Etag != *before.Etag {
				t.Errorf("a refused write changed the load balancer")
			}
		})
	}
	if c := emu.Counters(); c.PreconditionFailed != 2 {
		t.Errorf("412s = %d, want 2", c.PreconditionFailed)
	}
}

// TestTwoWritersConflict is the race of the issue report: an endpoint
// updater and the service reconcile write one load balancer from two
// places. The emulator refuses the second write; with one writer per load
// balancer (the controller's queue) it never happens.
func TestTwoWritersConflict(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	a, b := newProvider(t, emu, provider.Hooks{}), newProvider(t, emu, provider.Hooks{})
	ctx := context.Background()
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "local", 80, backends(8080, "10.0.0.1")...),
		listener("default", "web", 80, backends(8080, "10.0.5.1")...),
	}}
	converge(t, a, want)
	obsA, _ := a.Observe(ctx, "lb-a")
	obsB, _ := b.Observe(ctx, "lb-a")
	endpoints := fill(want, obsA)
	endpoints.Listeners[0].Backends = backends(8080, "10.0.0.1", "10.0.0.2")
	service := fill(want, obsB)
	service.Listeners[1].Probe.IntervalMillis = 5000
	if err := a.Apply(ctx, model.Diff(obsA, endpoints)); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, model.Diff(obsB, service)); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("second writer: err = %v, want ErrConflict", err)
	}
	obs, _ := b.Observe(ctx, "lb-a")
	if got := obs.Listener(want.Listeners[0].Name).Backends; len(got) != 2 {
		t.Errorf("the first write was lost: %+v", got)
	}
}

// TestThrottlingIsRetryAfter: a 429 is not retried inside the SDK; it comes
// back as provider.RetryAfterError with ARM's Retry-After.
func TestThrottlingIsRetryAfter(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	emu.SetFaults(azurearm.Faults{Rate: 1, Throttle: 1, RetryAfter: 3 * time.Second})
	_, err := p.Observe(context.Background(), "lb-a")
	var ra *provider.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 3*time.Second {
		t.Fatalf("err = %v, want RetryAfterError after 3s", err)
	}
	if c := emu.Counters(); c.Gets != 2 || c.Throttled != 1 {
		t.Errorf("counters = %+v, want the 429 not retried", c)
	}
}

// TestServerErrorsRetriedBySDK: a transient 500 is retried by the SDK's
// retry policy; the write succeeds once.
func TestServerErrorsRetriedBySDK(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	emu.SetFaults(azurearm.Faults{Rate: 1, ServerError: 1, Cooldown: 1})
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}}
	converge(t, p, want)
	c := emu.Counters()
	if c.ServerErrors == 0 || c.Writes != 1 {
		t.Errorf("counters = %+v, want 500s retried and one write", c)
	}
}

// TestForeignChildrenKept: a load balancer zerodrop did not create keeps
// everything that is not zerodrop's; zerodrop's Delete removes its own
// children and its owner tag only.
func TestForeignChildrenKept(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	lbID := "/subscriptions/" + subID + "/resourceGroups/" + group + "/providers/Microsoft.Network/loadBalancers/lb-a"
	if err := emu.Seed(subID, group, armnetwork.LoadBalancer{
		Name: to.Ptr("lb-a"), Location: to.Ptr("westeurope"), Tags: map[string]*string{"team": to.Ptr("net")},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("legacy"),
				Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr("vms")}},
			Probes: []*armnetwork.Probe{{Name: to.Ptr("ssh"), Properties: &armnetwork.ProbePropertiesFormat{
				Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](22)}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("ssh"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](22), BackendPort: to.Ptr[int32](22),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/legacy")},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(lbID + "/backendAddressPools/vms")},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(lbID + "/probes/ssh")}}}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, emu, provider.Hooks{})
	ctx := context.Background()
	if obs, err := p.Observe(ctx, "lb-a"); err != nil || obs == nil || len(obs.Listeners) != 0 {
		t.Fatalf("observe = %+v, %v; want an existing load balancer without zerodrop listeners", obs, err)
	}
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}}
	converge(t, p, want)
	lb, _ := emu.LoadBalancer(group, "lb-a")
	if n := len(lb.Properties.LoadBalancingRules); n != 2 || *lb.Tags["team"] != "net" {
		t.Fatalf("rules = %d tags = %v: the foreign rule or tag is gone", n, lb.Tags)
	}
	if err := p.Delete(ctx, "lb-a"); err != nil {
		t.Fatal(err)
	}
	lb, ok := emu.LoadBalancer(group, "lb-a")
	if !ok || len(lb.Properties.LoadBalancingRules) != 1 || *lb.Properties.LoadBalancingRules[0].Name != "ssh" ||
		len(lb.Properties.FrontendIPConfigurations) != 1 || lb.Tags[azure.TagOwner] != nil {
		t.Fatalf("after delete: exists=%v %+v tags=%v, want only the foreign children and tags", ok, lb.Properties, lb.Tags)
	}
}

// TestDeleteCreated: a load balancer zerodrop created goes with its last
// listener; deleting it again is a no-op.
func TestDeleteCreated(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	converge(t, p, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80)}})
	for i := 0; i < 2; i++ {
		if err := p.Delete(context.Background(), "lb-a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := emu.LoadBalancer(group, "lb-a"); ok {
		t.Fatal("load balancer still there")
	}
	if c := emu.Counters(); c.Deletes != 1 {
		t.Errorf("deletes = %d, want 1", c.Deletes)
	}
}

// TestOwnedBySomeoneElse: another owner's load balancer is neither read as
// zerodrop's nor written.
func TestOwnedBySomeoneElse(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	if err := emu.Seed(subID, group, armnetwork.LoadBalancer{Name: to.Ptr("lb-a"), Location: to.Ptr("westeurope"),
		Tags: map[string]*string{azure.TagOwner: to.Ptr("cluster-b")}}); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, emu, provider.Hooks{})
	if _, err := p.Observe(context.Background(), "lb-a"); !errors.Is(err, azure.ErrNotOwned) {
		t.Fatalf("err = %v, want ErrNotOwned", err)
	}
	if err := p.Delete(context.Background(), "lb-a"); !errors.Is(err, azure.ErrNotOwned) {
		t.Fatalf("delete: err = %v, want ErrNotOwned", err)
	}
}

// TestLongNames: a Service whose namespace and name do not fit Azure's 80
// characters is named by a hash, and a tag reads it back.
func TestLongNames(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	ns, name := strings.Repeat("n", 63), strings.Repeat("s", 63)
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener(ns, name, 80, backends(8080, "10.0.0.1")...), listener("default", "web", 80),
	}}
	converge(t, p, want)
	if plans := converge(t, newProvider(t, emu, provider.Hooks{}), want); len(plans) != 0 {
		t.Fatalf("long names do not read back: %v", plans)
	}
}

// TestMixedBackendPortsRefused: Azure has one backend port per rule.
func TestMixedBackendPortsRefused(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	l := listener("default", "web", 80, append(backends(8080, "10.0.0.1"), backends(9090, "10.0.0.2")...)...)
	err := p.Apply(context.Background(), model.Diff(nil, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{l}}))
	var ue *azure.UnrepresentableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnrepresentableError", err)
	}
	if c := emu.Counters(); c.Puts() != 0 {
		t.Errorf("%d PUTs for a refused plan", c.Puts())
	}
}

func TestNotConfigured(t *testing.T) {
	p := newProvider(t, azurearm.New(azurearm.Options{}), provider.Hooks{})
	if _, err := p.Observe(context.Background(), "default/web"); !errors.Is(err, azure.ErrNotConfigured) {
		t.Fatalf("err = %v, want ErrNotConfigured", err)
	}
}

// TestDriftIsRepaired: a zerodrop probe changed behind its back reads as a
// difference, and the next plan puts it back.
func TestDriftIsRepaired(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	want := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}}
	converge(t, p, want)
	lb, _ := emu.LoadBalancer(group, "lb-a")
	lb.Properties.Probes[0].Properties.IntervalInSeconds = to.Ptr[int32](30)
	if err := emu.Seed(subID, group, *lb); err != nil {
		t.Fatal(err)
	}
	if plans := converge(t, p, want); len(plans) != 1 || plans[0].Ops[0].Kind != model.OpUpdateListener {
		t.Fatalf("plans = %v, want one listener update", plans)
	}
	lb, _ = emu.LoadBalancer(group, "lb-a")
	if got := *lb.Properties.Probes[0].Properties.IntervalInSeconds; got != 5 {
		t.Errorf("probe interval %ds, want 5s (2s asked, Azure's minimum)", got)
	}
}
