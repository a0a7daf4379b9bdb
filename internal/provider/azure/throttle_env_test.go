package azure_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// TestThrottledWritesConverge: with the emulator throttling writes as ARM
// does (Options.Throttle; here one write a second, a bucket of one), a
// burst of endpoint changes on lb-a gets 429s, each back in the queue as a
// provider.RetryAfterError, and the load balancer converges — and no write
// after a 429 is sent before its Retry-After, though the next endpoint
// change enqueues the key meanwhile (the controller holds a throttled key
// until then; without the hold 9 to 13 of 11 to 15 were early).
func TestThrottledWritesConverge(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "throttle")
	emu := azurearm.New(azurearm.Options{Throttle: azurearm.Throttle{Writes: azurearm.Bucket{Size: 1, Refill: 1}}})
	const n = 3
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		for _, o := range []client.Object{lbService(ns, name, "lb-a", false), endpointSlice(ns, name, fmt.Sprintf("10.4.%d.1", i))} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 60*time.Second)
	_, since := emu.Calls(0)
	// A burst: every Service's endpoint changes, one every 150 ms.
	for round := range 3 {
		for i := range n {
			if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, fmt.Sprintf("web-%d-slice", i), func(o client.Object) {
				o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] = fmt.Sprintf("10.4.%d.%d", i, round+2)
			}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond)
		}
	}
	waitConverged(t, c, emu, r, ns, 60*time.Second)
	r.stop(t)

	calls, _ := emu.Calls(since)
	throttled, early := 0, 0
	var last time.Time // the last throttled write
	for i, call := range calls {
		if call.Method == http.MethodPut && call.Status == http.StatusTooManyRequests && i+1 < len(calls) && calls[i+1].Method != http.MethodGet {
			// The provider retries nothing throttled itself: the 429 goes
			// back to the queue, whose next pass observes lb-a first.
			t.Errorf("after a throttled write came %s %s, not the next pass's read", calls[i+1].Method, calls[i+1].Resource)
		}
		if call.Method != http.MethodPut {
			continue
		}
		if !last.IsZero() {
			// Retry-After is whole seconds, at least one.
			if call.Time.Sub(last) < 900*time.Millisecond {
				early++
			}
			last = time.Time{}
		}
		if call.Status == http.StatusTooManyRequests {
			throttled++
			last = call.Time
		}
	}
	if throttled == 0 || emu.Counters().Throttled != throttled {
		t.Fatalf("%d writes throttled (emulator counted %d) in %d calls, want some: the burst did not exceed the bucket", throttled, emu.Counters().Throttled, len(calls))
	}
	if early > 0 {
		t.Errorf("%d of the writes after a 429 were sent before its Retry-After (1 s), %d throttled", early, throttled)
	}
	t.Logf("%d writes throttled, converged", throttled)
}
