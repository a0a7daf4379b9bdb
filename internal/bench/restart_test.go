// Package bench measures what a leader restart costs: provider writes and the
// time until every load balancer has been verified, zerodrop's incremental
// sync against the upstream-like full sync, on the real apiserver and a real
// HAProxy. Run with `make bench` (BENCH_N sets the number of Services).
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
)

var services = flag.Int("n", 1000, "LoadBalancer Services to create")

// run is one controller start: what it wrote and how long it took to have
// reconciled every load balancer once.
type run struct {
	name     string
	writes   float64
	reads    float64
	duration time.Duration
	flags    modeFlags
}

func BenchmarkLeaderRestart(b *testing.B) {
	n := *services
	env := controlplane.StartEnv(b)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dir := b.TempDir()

	start := time.Now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%04d", i)
		if err := c.Create(ctx, benchService(name)); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, benchSlice(name, i)); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("created %d Services and EndpointSlices in %s\n", n, time.Since(start).Round(time.Millisecond))

	setup := startOnce(b, env.Config, dir, service.SyncIncremental, n, true)
	fmt.Printf("first controller built %d load balancers in %s (%v writes)\n", n, setup.duration.Round(time.Millisecond), setup.writes)

	var results []run
	for i := 0; i < b.N; i++ {
		r := startOnce(b, env.Config, dir, service.SyncIncremental, n, false)
		r.name = "zerodrop (incremental)"
		r.flags.mode = r.name
		results = append(results, r)
		f := startOnce(b, env.Config, dir, service.SyncFull, n, false)
		f.name = "upstream-like (--sync=full)"
		f.flags.mode = f.name
		results = append(results, f)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nleader restart, %d LoadBalancer Services, real HAProxy\n", n)
	var modes []modeFlags
	for _, r := range results {
		modes = append(modes, r.flags)
	}
	fmt.Fprintln(w, flagsLine(modes...))
	fmt.Fprintln(w, "mode\tprovider writes\tprovider reads\ttime to verify all")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%s\n", r.name, r.writes, r.reads, r.duration.Round(time.Millisecond))
	}
	w.Flush()
	// Invariant 1: the bench fails, not only prints, when a restart with
	// nothing changed writes.
	for i := 0; i < len(results); i += 2 {
		if results[i].writes != 0 {
			b.Fatalf("%s restart with nothing changed made %v provider writes, want 0", results[i].name, results[i].writes)
		}
	}
	b.ReportMetric(results[0].writes, "writes/restart")
	b.ReportMetric(results[0].duration.Seconds(), "verify-s")
	b.ReportMetric(results[1].writes, "full-writes/restart")
	b.ReportMetric(results[1].duration.Seconds(), "full-verify-s")
}

// startOnce starts a controller (a new leader) against the shared HAProxy
// state dir, waits until it has reconciled all n load balancers once (or, for
// the first start, until all are applied), and stops it.
func startOnce(b *testing.B, rc *rest.Config, dir string, sync service.SyncMode, n int, first bool) run {
	b.Helper()
	cfg := benchConfig(rc)
	cfg.HAProxy.Dir = dir
	b.Cleanup(func() { stopHAProxy(dir) })
	cfg.Sync = string(sync) // --sync: the figure compares both
	cfg.AddressPool, cfg.AddressMap = "127.0.128.0/17", labAddressMap
	r := startBench(b, cfg)
	m := r.Metrics
	start := time.Now()
	deadline := time.Now().Add(30 * time.Minute)
	for {
		var reconciled float64
		if first {
			reconciled = metrics.Sum(m.Reconciles.WithLabelValues("applied"))
		} else {
			reconciled = metrics.Sum(m.Reconciles)
		}
		if int(reconciled) >= n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %v of %d load balancers reconciled", reconciled, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := run{writes: metrics.Sum(m.ProviderWrites), reads: metrics.Sum(m.ProviderReads), duration: time.Since(start), flags: newModeFlags("", cfg)}
	r.stop(b)
	return res
}

func benchService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To("zerodrop.dev/haproxy"),
			Selector:          map[string]string{"app": name},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func benchSlice(name string, i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for j := 0; j < 2; j++ {
		addr := fmt.Sprintf("198.18.%d.%d", (2*i+j)/250, (2*i+j)%250+1)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}
