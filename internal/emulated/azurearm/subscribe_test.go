package azurearm_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// TestSubscribe: every subscriber is called once per accepted write and per
// Seed, with the change visible, beside OnWrite's hook; never for a read or
// a refused write; not after its cancel.
func TestSubscribe(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	c := newClients(t, emu)
	ctx := context.Background()
	etag := func() string {
		lb, ok := emu.LoadBalancer(rg, "lb")
		if !ok {
			return "none"
		}
		return *lb.Etag
	}
	var first, second []string
	hooked := 0
	emu.OnWrite(func() { hooked++ })
	defer emu.OnWrite(nil)
	cancelFirst := emu.Subscribe(func() { first = append(first, etag()) })
	cancelSecond := emu.Subscribe(func() { second = append(second, etag()) })
	defer cancelSecond()

	created, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.lbs.Get(ctx, rg, "lb", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := put(ctx, c, simpleLB(nil), http.Header{"If-None-Match": {"*"}}); status(err) != http.StatusPreconditionFailed {
		t.Fatalf("create over an existing one: %v, want 412", err)
	}
	pool, err := putPool(ctx, c, "10.0.0.1", http.Header{"If-Match": {*created.Etag}})
	if err != nil {
		t.Fatal(err)
	}
	seeded := simpleLB(map[string]*string{"seeded": to.Ptr("yes")})
	seeded.Name = to.Ptr("lb")
	if err := emu.Seed(sub, rg, seeded); err != nil {
		t.Fatal(err)
	}
	want := []string{*created.Etag, *pool.Etag, etag()}
	if !slices.Equal(first, want) || !slices.Equal(second, want) {
		t.Fatalf("subscribers saw ETags %v and %v, want %v (one per write and Seed, after it)", first, second, want)
	}
	if hooked != 2 {
		t.Errorf("OnWrite's hook ran %d times, want 2 (the two writes)", hooked)
	}
	cancelFirst()
	cancelFirst()
	if _, err := putPool(ctx, c, "10.0.0.2", nil); err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || len(second) != 4 {
		t.Errorf("after cancelling the first: %d and %d calls, want 3 and 4", len(first), len(second))
	}
}
