package azurearm_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// do sends one request straight to the emulator's handler, as principal.
func do(t *testing.T, emu *azurearm.Emulator, method, principal string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req := httptest.NewRequest(method, lbID+"?api-version=2025-01-01", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer id:"+principal)
	rec := httptest.NewRecorder()
	emu.ServeHTTP(rec, req)
	return rec
}

// withTwo adds a second frontend and a rule on it to simpleLB's one of each.
func withTwo() armnetwork.LoadBalancer {
	lb := simpleLB(nil)
	p := lb.Properties
	p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr("fe2"),
		Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}}})
	r := *p.LoadBalancingRules[0]
	props := *r.Properties
	r.Name, props.FrontendIPConfiguration = to.Ptr("rule2"), &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/fe2")}
	r.Properties = &props
	p.LoadBalancingRules = append(p.LoadBalancingRules, &r)
	return lb
}

// TestLimitsRefuseTheWholePut: with Options.Limits a PUT that would take
// the load balancer past its frontends or rules is refused whole (400, the
// stored document unchanged); without them the same PUT is accepted, as
// before the limits existed.
func TestLimitsRefuseTheWholePut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits azurearm.LBLimits
		code   string
	}{
		{"frontends", azurearm.LBLimits{Frontends: 1}, "LoadBalancerFrontendIPConfigurationCountLimitExceeded"},
		{"rules", azurearm.LBLimits{Frontends: 2, Rules: 1}, "LoadBalancerRuleCountLimitExceeded"},
		{"off", azurearm.LBLimits{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := azurearm.New(azurearm.Options{Limits: tc.limits})
			if rec := do(t, emu, http.MethodPut, "a", simpleLB(nil)); rec.Code >= 300 {
				t.Fatalf("first PUT: %d %s", rec.Code, rec.Body)
			}
			before, _ := emu.LoadBalancer(rg, "lb")
			rec := do(t, emu, http.MethodPut, "a", withTwo())
			after, _ := emu.LoadBalancer(rg, "lb")
			if tc.code == "" {
				if rec.Code >= 300 || len(after.Properties.LoadBalancingRules) != 2 {
					t.Fatalf("without limits: %d %s, %d rules stored", rec.Code, rec.Body, len(after.Properties.LoadBalancingRules))
				}
				return
			}
			if rec.Code != http.StatusBadRequest || rec.Header().Get("X-Ms-Error-Code") != tc.code {
				t.Fatalf("got %d %q %s, want 400 %s", rec.Code, rec.Header().Get("X-Ms-Error-Code"), rec.Body, tc.code)
			}
			if *after.Etag != *before.Etag || len(after.Properties.LoadBalancingRules) != 1 {
				t.Fatalf("refused PUT changed the load balancer: etag %s → %s, %d rules", *before.Etag, *after.Etag, len(after.Properties.LoadBalancingRules))
			}
		})
	}
}

// TestThrottleBuckets: with Options.Throttle each principal's writes share
// one bucket: its Size pass (each answer saying how many are left), the next
// is a 429 with Retry-After counted in Throttled, another principal and the
// reads have buckets of their own, and the bucket refills at Refill.
func TestThrottleBuckets(t *testing.T) {
	emu := azurearm.New(azurearm.Options{Throttle: azurearm.Throttle{
		Writes: azurearm.Bucket{Size: 3, Refill: 2}, Reads: azurearm.Bucket{Size: 100, Refill: 1}}})
	for i := range 3 {
		rec := do(t, emu, http.MethodPut, "a", simpleLB(nil))
		if rec.Code >= 300 {
			t.Fatalf("write %d: %d %s", i, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get("X-Ms-Ratelimit-Remaining-Subscription-Writes"), []string{"2", "1", "0"}[i]; got != want {
			t.Errorf("write %d: remaining writes %q, want %s", i, got, want)
		}
	}
	rec := do(t, emu, http.MethodPut, "a", simpleLB(nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(rec.Body.String(), "SubscriptionRequestsThrottled") {
		t.Fatalf("4th write: %d Retry-After %q %s, want 429 after 1 s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if c := emu.Counters(); c.Throttled != 1 || c.LBPuts != 4 || c.Writes != 3 {
		t.Fatalf("counters %+v, want 4 PUTs received, 3 written, 1 throttled", c)
	}
	if rec := do(t, emu, http.MethodGet, "a", nil); rec.Code != http.StatusOK {
		t.Fatalf("a read after the writes' bucket is empty: %d", rec.Code)
	}
	if rec := do(t, emu, http.MethodPut, "b", simpleLB(nil)); rec.Code >= 300 {
		t.Fatalf("another principal's write: %d", rec.Code)
	}
	time.Sleep(600 * time.Millisecond) // 1.2 tokens back at 2 a second
	if rec := do(t, emu, http.MethodPut, "a", simpleLB(nil)); rec.Code >= 300 {
		t.Fatalf("write after the refill: %d %s", rec.Code, rec.Body)
	}
}

// TestThrottleOffByDefault: without Options.Throttle a burst well past
// ARM's write bucket is never throttled and carries no remaining-requests
// header, as before throttling existed.
func TestThrottleOffByDefault(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	for i := range azurearm.ARMThrottle.Writes.Size + 10 {
		rec := do(t, emu, http.MethodPut, "a", simpleLB(nil))
		if rec.Code >= 300 || rec.Header().Get("X-Ms-Ratelimit-Remaining-Subscription-Writes") != "" {
			t.Fatalf("write %d: %d, header %q", i, rec.Code, rec.Header().Get("X-Ms-Ratelimit-Remaining-Subscription-Writes"))
		}
	}
	if c := emu.Counters(); c.Throttled != 0 {
		t.Fatalf("throttled %d", c.Throttled)
	}
}

// computeStub serves every path under Microsoft.Compute with 200.
type computeStub struct{}

func (computeStub) Route(path string) (string, string, bool) {
	return "virtualMachine", "rg-1/vm", strings.Contains(strings.ToLower(path), "/microsoft.compute/")
}
func (computeStub) ServeARM(*http.Request, []byte) azurearm.ComputeReply {
	return azurearm.ComputeReply{Status: http.StatusOK, Header: http.Header{}, Body: []byte(`{}`)}
}
func (computeStub) BackendIPConfigurations(string) []string { return nil }

// TestThrottleCoversCompute: the compute side's requests (AttachCompute)
// take the principal's buckets too: ARM throttles before any resource
// provider.
func TestThrottleCoversCompute(t *testing.T) {
	emu := azurearm.New(azurearm.Options{Throttle: azurearm.Throttle{Reads: azurearm.Bucket{Size: 1, Refill: 0.1}}})
	emu.AttachCompute(computeStub{})
	get := func() int {
		req := httptest.NewRequest(http.MethodGet, "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Compute/virtualMachines/vm?api-version=2024-07-01", nil)
		req.Header.Set("Authorization", "Bearer id:a")
		rec := httptest.NewRecorder()
		emu.ServeHTTP(rec, req)
		return rec.Code
	}
	if first, second := get(), get(); first != http.StatusOK || second != http.StatusTooManyRequests {
		t.Fatalf("two reads with a bucket of one: %d, %d; want 200, 429", first, second)
	}
}
