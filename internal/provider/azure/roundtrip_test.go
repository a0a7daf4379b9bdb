package azure_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// svcState is one Service of the random walk.
type svcState struct {
	ns, name   string
	node       bool // backends are the nodes, on a node port
	local      bool // node mode with an HTTP probe on healthCheckNodePort
	udp        bool
	ports      []int32
	intervalMs int32
	endpoints  map[string]model.BackendState
}

func (s *svcState) listeners(nodes []string, i int) []model.Listener {
	var out []model.Listener
	for _, port := range s.ports {
		proto := model.TCP
		if s.udp && port == 53 {
			proto = model.UDP
		}
		l := model.Listener{Name: model.ListenerName(s.ns, s.name, "TCP", port), Port: port, Protocol: proto,
			Probe: model.Probe{Kind: model.ProbeTCP, IntervalMillis: s.intervalMs, Rise: model.DefaultRise, Fall: model.DefaultFall}}
		if proto == model.UDP {
			l.Name = model.ListenerName(s.ns, s.name, "UDP", port)
		}
		if s.node {
			nodePort := int32(30000 + 10*i + int(port)%7)
			l.Backends = backends(nodePort, nodes...)
			if s.local {
				l.Probe = model.Probe{Kind: model.ProbeHTTP, Port: int32(32000 + i), Path: "/healthz", IntervalMillis: s.intervalMs, Rise: 2, Fall: 3}
			}
		} else {
			for a, st := range s.endpoints {
				b := model.Backend{Address: a, Port: 8000 + port, Weight: model.DefaultWeight, State: st}
				l.Backends = append(l.Backends, b)
			}
		}
		out = append(out, l)
	}
	return out
}

type world struct {
	svcs  map[string]*svcState
	nodes []string
}

func (w *world) desired(key string) *model.LoadBalancer {
	lb := &model.LoadBalancer{Key: key}
	keys := make([]string, 0, len(w.svcs))
	for k := range w.svcs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		lb.Listeners = append(lb.Listeners, w.svcs[k].listeners(w.nodes, i)...)
	}
	return model.Canonical(lb)
}

func (w *world) step(rng *rand.Rand) string {
	names := []string{"default/web", "default/api", "shop/cart", "shop/pay", "ops/node-a", "ops/node-b",
		strings.Repeat("l", 40) + "/" + strings.Repeat("x", 40)}
	pick := func() *svcState {
		if len(w.svcs) == 0 {
			return nil
		}
		keys := make([]string, 0, len(w.svcs))
		for k := range w.svcs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return w.svcs[keys[rng.IntN(len(keys))]]
	}
	switch rng.IntN(7) {
	case 0: // a Service comes
		id := names[rng.IntN(len(names))]
		if w.svcs[id] != nil {
			return "noop"
		}
		ns, name, _ := strings.Cut(id, "/")
		s := &svcState{ns: ns, name: name, node: strings.HasPrefix(name, "node"), intervalMs: []int32{100, 2000, 5000, 7500}[rng.IntN(4)],
			ports: []int32{80}, endpoints: map[string]model.BackendState{}}
		s.local = s.node && rng.IntN(2) == 0
		if rng.IntN(3) == 0 {
			s.ports, s.udp = append(s.ports, 53), !s.node
		}
		for j := 0; j < rng.IntN(4); j++ {
			s.endpoints[fmt.Sprintf("10.%d.0.%d", len(name), rng.IntN(20)+1)] = model.Active
		}
		w.svcs[id] = s
		return "add " + id
	case 1: // a Service goes
		if s := pick(); s != nil {
			delete(w.svcs, s.ns+"/"+s.name)
			return "remove " + s.name
		}
	case 2, 3: // endpoints churn: add, drain, remove
		if s := pick(); s != nil && !s.node {
			a := fmt.Sprintf("10.%d.0.%d", len(s.name), rng.IntN(20)+1)
			switch st, ok := s.endpoints[a]; {
			case !ok:
				s.endpoints[a] = model.Active
			case st == model.Active:
				s.endpoints[a] = model.Draining
			default:
				delete(s.endpoints, a)
			}
			return "endpoints " + s.name
		}
	case 4: // a node comes or goes
		if rng.IntN(2) == 0 || len(w.nodes) < 2 {
			w.nodes = append(w.nodes, fmt.Sprintf("10.240.0.%d", len(w.nodes)+1))
		} else {
			w.nodes = w.nodes[:len(w.nodes)-1]
		}
		return "nodes"
	case 5: // the probe changes
		if s := pick(); s != nil {
			s.intervalMs = []int32{100, 2000, 5000, 7500}[rng.IntN(4)]
			return "probe " + s.name
		}
	case 6: // a port comes or goes
		if s := pick(); s != nil {
			if len(s.ports) == 1 {
				s.ports = append(s.ports, 443)
			} else {
				s.ports = s.ports[:1]
			}
			return "ports " + s.name
		}
	}
	return "noop"
}

// TestRandomWalkRoundTrip is the provider's half of invariant 1: after any
// applied plan, what Observe reads back is exactly what was desired, so the
// next Diff is empty; every plan is one write, and a plan that changes the
// backends of one pool is a pool PUT.
func TestRandomWalkRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			emu := azurearm.New(azurearm.Options{Seed: seed})
			var writes []string
			// 80 steps of reads and polls: a read budget as large as the
			// walk needs (the budget is budget_env_test.go's subject).
			p := newProviderWith(t, emu, provider.Hooks{Write: func(op string) { writes = append(writes, op) }},
				func(o *azure.Options) { o.ReadQPS, o.ReadBurst = 1000, 1000 })
			ctx := context.Background()
			w := &world{svcs: map[string]*svcState{}, nodes: addrs("10.240.0", 2)}
			poolPuts := 0
			for i := 0; i < 80; i++ {
				what := w.step(rng)
				want := w.desired("lb-a")
				obs, err := p.Observe(ctx, "lb-a")
				if err != nil {
					t.Fatal(err)
				}
				plan := model.Diff(obs, fill(want, obs))
				writes = nil
				if err := p.Apply(ctx, plan); err != nil {
					t.Fatalf("step %d (%s): apply %s: %v", i, what, plan, err)
				}
				if n := len(writes); plan.Empty() && n != 0 || !plan.Empty() && n != 1 {
					t.Fatalf("step %d (%s): %d writes %v for plan %s", i, what, n, writes, plan)
				}
				if len(writes) == 1 && writes[0] == "put-pool" {
					poolPuts++
				}
				obs, err = p.Observe(ctx, "lb-a")
				if err != nil {
					t.Fatal(err)
				}
				// Compared with cmp, not Diff: a field Diff overlooks would
				// be overlooked on both sides.
				if d := testutil.LBDiff(fill(want, obs), obs); d != "" {
					t.Fatalf("step %d (%s): after %s the load balancer differs (-want +got):\n%s", i, what, plan, d)
				}
			}
			if poolPuts == 0 {
				t.Errorf("no plan was written as a pool PUT")
			}
			t.Logf("%+v, %d pool PUTs", emu.Counters(), poolPuts)
		})
	}
}
