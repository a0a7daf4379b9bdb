package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testenv"
)

// BenchmarkEndpointChurn changes one load balancer's endpoints 100 times a
// second for a few seconds and counts HAProxy writes: zerodrop coalesces the
// changes; the baseline is one write per change.
func BenchmarkEndpointChurn(b *testing.B) {
	const rate, seconds = 100, 5
	env := testenv.StartEnv(b)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dir := b.TempDir()
	b.Cleanup(func() { stopHAProxy(dir) })
	if err := c.Create(ctx, benchService("churn")); err != nil {
		b.Fatal(err)
	}
	sl := benchSlice("churn", 0)
	if err := c.Create(ctx, sl); err != nil {
		b.Fatal(err)
	}

	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prov, err := haproxy.New(cctx, haproxy.Options{Dir: dir, Hooks: m.ProviderHooks("haproxy"), Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	defer prov.Close()
	mgr, err := manager.New(env.Config, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := service.New(cctx, mgr, service.Options{
		Provider: prov, AddressPool: netip.MustParsePrefix("127.0.103.0/24"), BackendAddressMap: addrMapLab(),
		Metrics: m, Logger: logr.Discard(), ImmediateRemoval: true, ResyncPeriod: time.Hour,
	}); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(cctx) }()
	for metrics.Sum(m.Reconciles.WithLabelValues("applied")) < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	before := metrics.Sum(m.ProviderWrites)

	// Each change swaps one endpoint for a new one: one add and one remove
	// if applied alone.
	changes := 0
	ticker := time.NewTicker(time.Second / rate)
	deadline := time.Now().Add(seconds * time.Second)
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
	writes := metrics.Sum(m.ProviderWrites) - before
	cancel()
	<-done

	perChange := float64(changes * 2) // one add + one remove per change
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nendpoint churn on one load balancer: %d changes in %d s (target %d/s), real HAProxy\n", changes, seconds, rate)
	fmt.Fprintln(w, "mode\tHAProxy writes\twrites per change")
	fmt.Fprintf(w, "one write per change (baseline)\t%.0f\t%.2f\n", perChange, perChange/float64(changes))
	fmt.Fprintf(w, "zerodrop (coalesced)\t%.0f\t%.2f\n", writes, writes/float64(changes))
	fmt.Fprintf(w, "coalescing ratio\t%.1fx\t\n", perChange/writes)
	w.Flush()
	b.ReportMetric(writes/float64(changes), "writes/change")
	b.ReportMetric(perChange/writes, "coalescing-ratio")
}
