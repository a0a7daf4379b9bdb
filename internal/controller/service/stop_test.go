package service_test

import (
	"context"
	"fmt"
	"testing"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// heldProvider is the memory provider whose reads wait until release is
// closed, and which counts the reads under way.
type heldProvider struct {
	*memory.Provider
	release chan struct{}
	reading chan struct{}
}

func (h *heldProvider) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	h.reading <- struct{}{}
	<-h.release
	return h.Provider.Observe(ctx, key)
}

// TestStopStartsNoReconcile: a controller told to stop finishes the
// reconciles under way and starts none of the keys still queued (the
// workqueue hands them out after ShutDown; at 10,000 queued keys working
// through them outlasted the manager's grace period).
func TestStopStartsNoReconcile(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class, n = "default", "zerodrop.dev/memory", 16
	for i := range n {
		if err := c.Create(ctx, lbService(ns, fmt.Sprintf("stop-%d", i), class, nil)); err != nil {
			t.Fatal(err)
		}
	}
	h := &heldProvider{Provider: memory.New(provider.Hooks{}), release: make(chan struct{}), reading: make(chan struct{}, n)}
	r := startController(t, cfg, h, "")
	// Every worker (4, the default) is in a reconcile; the other keys wait
	// in the queue.
	const workers = 4
	for range workers {
		<-h.reading
	}
	r.cancel()
	close(h.release)
	if err := <-r.done; err != nil {
		t.Errorf("manager: %v", err)
	}
	if got := metrics.Sum(r.metrics.Reconciles); got > workers {
		t.Fatalf("%v reconciles after the stop began with %d under way and %d queued, want at most %d", got, workers, n-workers, workers)
	}
}
