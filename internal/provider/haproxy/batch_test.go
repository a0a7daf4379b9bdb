package haproxy

import (
	"testing"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestReadsAreBatched: reads within the batch window share one snapshot, and
// a write through the provider ends the window, so the next read sees it.
func TestReadsAreBatched(t *testing.T) {
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	ctx := testContext(t)
	bs := startBackends(t, 2, "127.0.3")
	port := freePort(t, "127.0.3.50")
	desired := &model.LoadBalancer{Key: "ns/batch", Listeners: []model.Listener{listenerOf("ns/batch", "tcp-80", "127.0.3.50", port, bs)}}
	applyDiff(t, p, desired)

	c.take()
	for i := 0; i < 10; i++ {
		if _, err := p.Observe(ctx, "ns/batch"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Backends(ctx, "ns/batch"); err != nil {
			t.Fatal(err)
		}
	}
	if _, reads := c.take(); count(reads, "show-stat") != 1 {
		t.Fatalf("20 reads in one window made %d snapshots (%v), want 1", count(reads, "show-stat"), reads)
	}

	smaller := &model.LoadBalancer{Key: "ns/batch", Listeners: []model.Listener{listenerOf("ns/batch", "tcp-80", "127.0.3.50", port, bs[:1])}}
	applyDiff(t, p, smaller)
	obs, err := p.Observe(ctx, "ns/batch")
	if err != nil {
		t.Fatal(err)
	}
	if lbDiff(smaller, obs) != "" {
		t.Fatalf("a read after a write returned the state before it: %+v", obs)
	}
}
