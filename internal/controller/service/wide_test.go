package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// groupingProvider is the memory provider as a provider.Grouper (HAProxy's
// group reload joins the calls that wait at once): each Apply waits until
// want Applies are under way at once, or until a bound passes, and the
// most seen at once is recorded.
type groupingProvider struct {
	*memory.Provider
	width, want int

	mu      sync.Mutex
	cond    *sync.Cond
	now, hi int
}

func (g *groupingProvider) GroupWidth() int { return g.width }

func (g *groupingProvider) Apply(ctx context.Context, plan model.Plan) error {
	g.mu.Lock()
	g.now++
	g.hi = max(g.hi, g.now)
	g.cond.Broadcast()
	// The bound only keeps a failing run finite: with too few workers the
	// want is never reached and each Apply goes on after it.
	deadline := time.Now().Add(20 * time.Second)
	stop := time.AfterFunc(20*time.Second, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	for g.hi < g.want && time.Now().Before(deadline) {
		g.cond.Wait()
	}
	stop.Stop()
	g.now--
	g.mu.Unlock()
	return g.Provider.Apply(ctx, plan)
}

// reset returns the most Applies seen at once and starts counting again.
func (g *groupingProvider) reset() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	hi := g.hi
	g.hi = 0
	return hi
}

// TestWideWhereWritesGroup: a provider whose writes join into one
// (provider.Grouper) gets load balancers reconciled by up to its
// GroupWidth workers at once, more than --workers (4), so that one of its
// writes can carry many: the Services that exist at start (a replica's
// first build), and those that come later at once (churn).
func TestWideWhereWritesGroup(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class, n = "default", "zerodrop.dev/memory", 12
	g := &groupingProvider{Provider: memory.New(provider.Hooks{}), width: n, want: 8}
	g.cond = sync.NewCond(&g.mu)
	create := func(prefix string) {
		for i := range n {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if err := c.Create(ctx, lbService(ns, name, class, nil)); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, slice(ns, name, 8080, fmt.Sprintf("10.1.0.%d", i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	built := func(prefix string) {
		eventually(t, 60*time.Second, "every "+prefix+" load balancer built", func() (bool, string) {
			done := 0
			for i := range n {
				if lb, _ := g.Observe(ctx, fmt.Sprintf("%s/%s-%d", ns, prefix, i)); len(backendsOf(lb)) == 1 {
					done++
				}
			}
			return done == n, fmt.Sprintf("%d of %d built", done, n)
		})
	}
	create("first")
	startController(t, cfg, g, service.SyncIncremental)
	built("first")
	if hi := g.reset(); hi < g.want {
		t.Errorf("at most %d Applies at once in the first pass, want %d (more than the 4 workers)", hi, g.want)
	}
	create("later")
	built("later")
	if hi := g.reset(); hi < g.want {
		t.Errorf("at most %d Applies at once for Services created later, want %d (more than the 4 workers)", hi, g.want)
	}
}
