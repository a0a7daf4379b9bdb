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
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/rest"
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
// second for a few seconds and counts HAProxy writes, twice on the real
// apiserver and HAProxy: with zerodrop's coalescing, and with every change
// reconciled at once (one write per change, the baseline).
func BenchmarkEndpointChurn(b *testing.B) {
	const rate, seconds = 100, 5
	env := testenv.StartEnv(b)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		name            string
		changes, writes int
	}
	var results []result
	for i, mode := range []struct {
		name   string
		window time.Duration
	}{{"every change at once (baseline)", -1}, {"zerodrop (coalesced, 250ms)", 0}} {
		changes, writes := churn(b, env.Config, c, fmt.Sprintf("churn-%d", i), mode.window, rate, seconds)
		results = append(results, result{mode.name, changes, writes})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nendpoint churn on one load balancer, %d changes/s for %d s, real HAProxy\n", rate, seconds)
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
// changes made and the HAProxy writes they caused.
func churn(b *testing.B, cfg *rest.Config, c client.Client, name string, window time.Duration, rate, seconds int) (int, int) {
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
	mgr, err := manager.New(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	// Only this benchmark's Service: the other run's belongs to another HAProxy.
	if _, err := service.New(cctx, mgr, service.Options{
		Provider: prov, AddressPool: netip.MustParsePrefix("127.0.103.0/24"), BackendAddressMap: addrMapLab(),
		Metrics: m, Logger: logr.Discard(), ImmediateRemoval: true, ResyncPeriod: time.Hour, CoalesceWindow: window,
		KeyFunc:           func(s *corev1.Service) string { return s.Namespace + "/" + s.Name },
		LoadBalancerClass: "zerodrop.dev/haproxy",
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
	cancel()
	<-done
	// Leave no load balancer to the next run's HAProxy.
	_ = c.Delete(ctx, benchService(name))
	return changes, writes
}
