package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"text/tabwriter"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
)

// BenchmarkEndpointChurn changes one load balancer's endpoints 100 times a
// second for a few seconds and counts HAProxy writes, twice on the real
// apiserver and HAProxy: with zerodrop's coalescing, and with every change
// reconciled at once (one write per change, the baseline).
func BenchmarkEndpointChurn(b *testing.B) {
	const rate, seconds = 100, 5
	env := controlplane.StartEnv(b)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		name            string
		changes, writes int
		flags           modeFlags
	}
	var results []result
	for i, mode := range []struct {
		name   string
		window time.Duration
	}{{"every change at once (baseline)", -1}, {"zerodrop (coalesced, 250ms)", 0}} {
		changes, writes, flags := churn(b, env.Config, c, fmt.Sprintf("churn-%d", i), mode.window, rate, seconds)
		flags.mode = mode.name
		results = append(results, result{mode.name, changes, writes, flags})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nendpoint churn on one load balancer, %d changes/s for %d s, real HAProxy\n", rate, seconds)
	fmt.Fprintln(w, flagsLine(results[0].flags, results[1].flags))
	fmt.Fprintln(w, "mode\tendpoint changes\tHAProxy writes\twrites per change")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\n", r.name, r.changes, r.writes, float64(r.writes)/float64(r.changes))
	}
	ratio := (float64(results[0].writes) / float64(results[0].changes)) / (float64(results[1].writes) / float64(results[1].changes))
	fmt.Fprintf(w, "coalescing ratio (writes per change, baseline / zerodrop)\t\t\t%.1fx\n", ratio)
	w.Flush()
	b.ReportMetric(float64(results[1].writes)/float64(results[1].changes), "writes/change")
	b.ReportMetric(ratio, "coalescing-ratio")
}

// churn runs one controller with the given coalescing window against its own
// HAProxy and Service, makes rate endpoint changes a second, and returns the
// changes made, the HAProxy writes they caused and what the controller ran
// with.
func churn(b *testing.B, rc *rest.Config, c client.Client, name string, window time.Duration, rate, seconds int) (int, int, modeFlags) {
	ctx := context.Background()
	dir := b.TempDir()
	b.Cleanup(func() { stopHAProxy(dir) })
	if err := c.Create(ctx, benchService(name)); err != nil {
		b.Fatal(err)
	}
	sl := benchSlice(name, 0)
	if err := c.Create(ctx, sl); err != nil {
		b.Fatal(err)
	}
	cfg := benchConfig(rc)
	cfg.HAProxy.Dir = dir
	cfg.AddressPool, cfg.AddressMap = "127.0.103.0/24", labAddressMap
	// Overridden (production: drain first): the figure is writes per
	// endpoint change, and a drain makes each removal two writes (drain,
	// then remove at zero connections).
	cfg.Immediate = true
	// The figure: the window (0: the production default, 250 ms), against
	// every change reconciled at once (negative).
	cfg.Override.CoalesceWindow = window
	r := startBench(b, cfg)
	m := r.Metrics
	for metrics.Sum(m.Reconciles.WithLabelValues("applied")) < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	before := metrics.Sum(m.ProviderWrites)

	// Each change swaps one endpoint for a new one.
	changes := 0
	ticker := time.NewTicker(time.Second / time.Duration(rate))
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		<-ticker.C
		if err := c.Get(ctx, client.ObjectKeyFromObject(sl), sl); err != nil {
			b.Fatal(err)
		}
		sl.Endpoints[i%2] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.18.200.%d", i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		if err := c.Update(ctx, sl); err != nil {
			b.Fatal(err)
		}
		changes++
	}
	ticker.Stop()
	time.Sleep(2 * time.Second) // let the last window close
	writes := int(metrics.Sum(m.ProviderWrites) - before)
	r.stop(b)
	// Leave no load balancer to the next run's HAProxy.
	_ = c.Delete(ctx, benchService(name))
	return changes, writes, newModeFlags("", cfg)
}
