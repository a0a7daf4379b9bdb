package azure_test

import (
	"net/http"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestPollsNoMoreOftenThanPollFrequency: a write's long-running operation
// is polled at most every Options.PollFrequency even when ARM asks for less
// (the emulator's Retry-After is 10 ms; ARM's 10 s), so polls cannot spend
// the read budget. The operation takes latency; the polls it can have had
// at one per freq are latency/freq plus the first and the last. A slow
// machine only polls less. Without the floor (pollfloor.go) the poller
// follows the 10 ms and the count is a hundred.
func TestPollsNoMoreOftenThanPollFrequency(t *testing.T) {
	const (
		latency = time.Second
		freq    = 200 * time.Millisecond
	)
	emu := azurearm.New(azurearm.Options{WriteLatency: latency, RecordPolls: true})
	p := newProviderWith(t, emu, provider.Hooks{}, func(o *azure.Options) { o.PollFrequency = freq })
	desired := &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
		listener("default", "web", 80, backends(8080, "10.0.0.1")...)}}
	converge(t, p, desired)
	calls, _ := emu.Calls(0)
	polls, writes := 0, 0
	for _, c := range calls {
		switch {
		case c.Method == http.MethodGet && c.Kind == "operation":
			polls++
		case c.Method == http.MethodPut:
			writes++
		}
	}
	if writes == 0 {
		t.Fatal("no write: the test exercised no operation")
	}
	allowed := writes * (int(latency/freq) + 2)
	if polls > allowed {
		t.Fatalf("%d polls of %d writes' operations of %v each, more than %d at one per %v", polls, writes, latency, allowed, freq)
	}
	t.Logf("%d polls for %d writes of %v each at one per %v at most", polls, writes, latency, freq)
}
