package azure_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// probes is a stand-in for the load balancer's probes behind the
// emulator's rule-health operation: each address Up or not, and how often
// it was asked.
type probes struct {
	mu    sync.Mutex
	up    map[string]bool
	asked int
	// hold, when set, keeps every answer back until it is closed: a test
	// that checks what is known before rule health's first answer must
	// not race the provider's background read.
	hold chan struct{}
}

func (p *probes) health(_, _, _ string) ([]azurearm.BackendHealth, error) {
	if p.hold != nil {
		<-p.hold
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	var out []azurearm.BackendHealth
	for a, up := range p.up {
		state := "Down"
		if up {
			state = "Up"
		}
		out = append(out, azurearm.BackendHealth{IPAddress: a, State: state})
	}
	return out, nil
}

func (p *probes) set(addr string, up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up[addr] = up
}

func healthProvider(t *testing.T, emu *azurearm.Emulator, maxAge time.Duration) *azure.Provider {
	t.Helper()
	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
		RuleHealth: true, HealthMaxAge: maxAge, HealthQPS: 100, HealthBurst: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// healthOf is what Backends says of addr: known, and healthy.
func healthOf(t *testing.T, p *azure.Provider, addr string) (known, healthy bool) {
	t.Helper()
	known, healthy, listed := listedHealth(t, p, addr)
	if !listed {
		t.Fatalf("%s not among the backends", addr)
	}
	return known, healthy
}

func listedHealth(t *testing.T, p *azure.Provider, addr string) (known, healthy, listed bool) {
	t.Helper()
	statuses, err := p.Backends(context.Background(), "lb-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range statuses {
		if s.Address == addr {
			return s.HealthKnown, s.Healthy, true
		}
	}
	return false, false, false
}

// eventually polls cond for up to 10 s (a loaded machine is slow, the
// answer comes from a background operation).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

// TestRuleHealthInBackends: with rule health, Backends reports what ARM's
// rule-health operation answered of each address's probe — a readiness gate
// waits for the probe, not for the pool — and follows the answers as they
// change; an address the last answer does not list (a new pod's) is not
// healthy yet; nor is any address before a rule's first answer.
func TestRuleHealthInBackends(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	pr := &probes{up: map[string]bool{"10.0.0.1": false}}
	emu.SetRuleHealth(pr.health)
	writer := newProvider(t, emu, provider.Hooks{})
	lb := func(addrs ...string) *model.LoadBalancer {
		return &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, addrs...)...)}}
	}
	converge(t, writer, lb("10.0.0.1"))
	p := healthProvider(t, emu, 50*time.Millisecond)

	if known, healthy := healthOf(t, p, "10.0.0.1"); !known || healthy {
		t.Errorf("before any answer: known %v healthy %v, want known and not healthy (in the pool is not probed Up)", known, healthy)
	}
	eventually(t, "10.0.0.1 known and not healthy while its probe is Down", func() bool { k, h := healthOf(t, p, "10.0.0.1"); return k && !h })
	pr.set("10.0.0.1", true)
	eventually(t, "10.0.0.1 healthy once its probe is Up", func() bool { _, h := healthOf(t, p, "10.0.0.1"); return h })
	converge(t, writer, lb("10.0.0.1", "10.0.0.2"))
	eventually(t, "10.0.0.2 listed", func() bool { _, _, listed := listedHealth(t, p, "10.0.0.2"); return listed })
	if known, healthy := healthOf(t, p, "10.0.0.2"); !known || healthy {
		t.Errorf("an address the last answer did not list: known %v healthy %v, want known and not healthy", known, healthy)
	}
	pr.set("10.0.0.1", false)
	eventually(t, "10.0.0.1 unhealthy once its probe is Down", func() bool { _, h := healthOf(t, p, "10.0.0.1"); return !h })
}

// TestRuleHealthRefused: where ARM refuses the rule-health operation (here:
// nothing answers it), health is unknown again — the gates fall back to
// pool membership instead of waiting for ever.
func TestRuleHealthRefused(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	writer := newProvider(t, emu, provider.Hooks{})
	converge(t, writer, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}})
	p := healthProvider(t, emu, 50*time.Millisecond)
	eventually(t, "health unknown once the operation is refused", func() bool { known, _ := healthOf(t, p, "10.0.0.1"); return !known })
}

// TestRuleHealthOff: without Options.RuleHealth no operation is asked and
// health is unknown, as before rule health.
func TestRuleHealthOff(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	pr := &probes{up: map[string]bool{"10.0.0.1": true}}
	emu.SetRuleHealth(pr.health)
	p := newProvider(t, emu, provider.Hooks{})
	converge(t, p, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}})
	if known, _ := healthOf(t, p, "10.0.0.1"); known {
		t.Error("health known without RuleHealth")
	}
	time.Sleep(50 * time.Millisecond)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.asked != 0 {
		t.Errorf("rule health asked %d times without RuleHealth", pr.asked)
	}
}

// TestRuleHealthFailureIsNotRefusal: an operation that starts and then
// fails (its result a 500, which the SDK polls again until the read's
// timeout) is a failure, not a refusal: the address stays not healthy —
// the gate does not fall back to the pool — until an answer has it Up.
func TestRuleHealthFailureIsNotRefusal(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	var mu sync.Mutex
	fails := 2
	emu.SetRuleHealth(func(_, _, _ string) ([]azurearm.BackendHealth, error) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return nil, errors.New("no probe data yet")
		}
		return []azurearm.BackendHealth{{IPAddress: "10.0.0.1", State: "Up"}}, nil
	})
	writer := newProvider(t, emu, provider.Hooks{})
	converge(t, writer, &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{listener("default", "web", 80, backends(8080, "10.0.0.1")...)}})
	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: 5 * time.Millisecond, BackendsMaxAge: time.Millisecond,
		RuleHealth: true, HealthMaxAge: 50 * time.Millisecond, HealthQPS: 100, HealthBurst: 100,
		// The SDK polls a result that answers 500 until the read's
		// timeout: each failed read lasts this long.
		HealthTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "10.0.0.1 healthy once an answer has it Up", func() bool {
		known, healthy := healthOf(t, p, "10.0.0.1")
		if !known {
			t.Fatal("health unknown after a failed read: the gate would go by the pool")
		}
		return healthy
	})
}
