package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
)

var (
	azureServices = flag.Int("azure-n", 500, "LoadBalancer Services for BenchmarkAzureRestart")
	azureLBCount  = flag.Int("azure-lbs", 2, "Azure load balancers the Services of BenchmarkAzureRestart share")
)

const (
	azureNS    = "azure-bench"
	azureClass = "zerodrop.dev/azure"
	// azureChurned Services get endpoint churn, azureChurnRate changes a
	// second for azureChurnSeconds.
	azureChurned, azureChurnRate, azureChurnSeconds = 20, 50, 5
)

// azureLBs are the load balancers' names, -azure-lbs of them (set by the
// benchmark; the first two keep the names of the 2-load-balancer figures).
var azureLBs []string

func azureLBNames(n int) []string {
	names := []string{"lb-a", "lb-b"}
	for i := len(names); i < n; i++ {
		names = append(names, fmt.Sprintf("lb-%02d", i))
	}
	return names[:n]
}

// azureGen is the endpoint generation of each churned Service.
var azureGen = map[int]int{}

// azureRun is one controller process on the emulated Azure: what it cost.
type azureRun struct {
	name                 string
	puts, poolPuts, gets int
	putBytes             int64
	preconditionFailed   int
	writes, conflicts    float64
	duration             time.Duration
	flags                modeFlags
}

// BenchmarkAzureRestart measures, on the real apiserver and the ARM emulator
// with -azure-n Services sharing -azure-lbs load balancers: a controller restart
// (zerodrop's diff against the upstream-like --sync=full), and endpoint churn
// written by one writer per load balancer against two independent writers
// (the issue report's race).
func BenchmarkAzureRestart(b *testing.B) {
	crlog.SetLogger(logr.Discard())
	n := *azureServices
	if *azureLBCount < 1 {
		b.Fatalf("-azure-lbs %d: want at least 1", *azureLBCount)
	}
	azureLBs = azureLBNames(*azureLBCount)
	env := controlplane.StartEnv(b)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: azureNS}}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := c.Create(ctx, azureService(i)); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, azureSlice(i, 0)); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("created %d Services and EndpointSlices in %s\n", n, time.Since(start).Round(time.Millisecond))
	emu := azurearm.New(azurearm.Options{})

	setup := azureOnce(b, env.Config, emu, service.SyncIncremental, func(r *azureController) bool {
		return azureRules(emu) == n
	})
	fmt.Printf("first controller built %d listeners on %d load balancers in %s (%d PUTs)\n", n, len(azureLBs), setup.duration.Round(time.Millisecond), setup.puts)

	var restarts []azureRun
	for i := 0; i < b.N; i++ {
		for _, m := range []struct {
			name string
			sync service.SyncMode
		}{{"zerodrop (incremental)", service.SyncIncremental}, {"upstream-like (--sync=full)", service.SyncFull}} {
			r := azureOnce(b, env.Config, emu, m.sync, func(r *azureController) bool {
				return metrics.Sum(r.metrics.Reconciles) >= float64(len(azureLBs))
			})
			r.name, r.flags.mode = m.name, m.name
			restarts = append(restarts, r)
		}
	}

	// Endpoint churn: one controller (one writer per load balancer) on one
	// Service and on many, then two controllers at once (two writers per
	// load balancer, the issue report's race).
	scenarios := []struct {
		name              string
		services, writers int
	}{
		{"zerodrop, 1 Service churning", 1, 1},
		{fmt.Sprintf("zerodrop, %d Services churning", azureChurned), azureChurned, 1},
		{fmt.Sprintf("two independent writers, %d Services churning", azureChurned), azureChurned, 2},
	}
	var churns []azureRun
	var changes []int
	for _, sc := range scenarios {
		r, n := azureChurn(b, env.Config, c, emu, sc.services, sc.writers)
		r.name, r.flags.mode = sc.name, sc.name
		churns, changes = append(churns, r), append(changes, n)
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nAzure (ARM emulator): controller restart, %d LoadBalancer Services on %d load balancers\n", n, len(azureLBs))
	var modes []modeFlags
	for _, r := range append(restarts, churns...) {
		modes = append(modes, r.flags)
	}
	fmt.Fprintln(w, flagsLine(modes...))
	fmt.Fprintln(w, "mode\tPUTs\tKiB PUT\tGETs\tzerodrop_provider_writes_total\ttime to reconcile all")
	for _, r := range restarts {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t%s\n", r.name, r.puts, r.putBytes/1024, r.gets, r.writes, r.duration.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nAzure (ARM emulator): endpoint churn, %d endpoint changes/s for %d s (a replaced endpoint drains 2s, then goes)\n", azureChurnRate, azureChurnSeconds)
	fmt.Fprintln(w, "mode\tchanges\tPUTs (pool)\tPUTs (load balancer)\t412s\tconflicts re-planned\tPUTs per change")
	for i, r := range churns {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%.0f\t%.2f\n", r.name, changes[i], r.poolPuts, r.puts-r.poolPuts, r.preconditionFailed, r.conflicts, float64(r.puts)/float64(changes[i]))
	}
	w.Flush()
	// Invariant 1: the bench fails, not only prints, when a restart with
	// nothing changed writes (restarts alternate incremental, full).
	for i := 0; i < len(restarts); i += 2 {
		if r := restarts[i]; r.puts != 0 || r.writes != 0 {
			b.Fatalf("%s restart with nothing changed made %d PUTs (%v provider writes), want 0", r.name, r.puts, r.writes)
		}
	}
	b.ReportMetric(float64(restarts[0].puts), "restart-PUTs")
	b.ReportMetric(float64(restarts[1].puts), "full-sync-restart-PUTs")
	b.ReportMetric(float64(churns[1].puts)/float64(changes[1]), "churn-PUTs/change")
	b.ReportMetric(float64(churns[0].preconditionFailed+churns[1].preconditionFailed), "churn-412s")
	b.ReportMetric(float64(churns[2].preconditionFailed), "two-writers-412s")
}

// azureController is one running controller process.
type azureController struct {
	*benchController
	metrics *metrics.Metrics
	flags   modeFlags
}

func azureStart(b *testing.B, rc *rest.Config, emu *azurearm.Emulator, sync service.SyncMode) *azureController {
	b.Helper()
	cfg := benchConfig(rc)
	cfg.Provider = "azure"
	cfg.Sync = string(sync) // --sync: the figures compare both
	cfg.Azure.SubscriptionID, cfg.Azure.ResourceGroup = "00000000-0000-0000-0000-000000000001", "rg-bench"
	cfg.Azure.LoadBalancers = strings.Join(azureLBs, ",")
	cfg.Azure.SubnetID = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg-bench/providers/Microsoft.Network/virtualNetworks/vnet/subnets/lb"
	cfg.Azure.Location = "westeurope"
	cfg.Azure.Credential, cfg.Azure.ClientOptions = emu.Credential(), emu.ClientOptions()
	// Overridden (production: 1 s, the SDK's minimum outside a test
	// binary): the emulator makes every write a long-running operation of
	// a few polls; the PUT and GET counts do not depend on it, the
	// durations do.
	cfg.Azure.PollFrequency = 10 * time.Millisecond
	// Overridden (production: elected): the churn with two writers is a
	// figure, and an elected leader would leave the second one standing by.
	cfg.LeaderElect = false
	r := startBench(b, cfg)
	return &azureController{benchController: r, metrics: r.Metrics, flags: ipMode(newModeFlags("", cfg))}
}

// ipMode adds to f what azureService changes from what a Service without
// the annotation gets, for the flags line: it asks for IP mode, where
// Azure's default is node mode.
func ipMode(f modeFlags) modeFlags {
	f.flags = append(f.flags, "Services annotated zerodrop.dev/backend-mode=ip (shipped: node on Azure)")
	return f
}

// azureOnce starts a controller, waits until done says so and the
// controller has been idle for a second, and stops it.
func azureOnce(b *testing.B, cfg *rest.Config, emu *azurearm.Emulator, sync service.SyncMode, done func(*azureController) bool) azureRun {
	b.Helper()
	before := emu.Counters()
	start := time.Now()
	r := azureStart(b, cfg, emu, sync)
	deadline := start.Add(10 * time.Minute)
	for !done(r) {
		if time.Now().After(deadline) {
			b.Fatalf("no convergence: %+v", emu.Counters().Sub(before))
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := azureIdle(r)
	d := emu.Counters().Sub(before)
	run := azureRun{puts: d.Puts(), poolPuts: d.PoolPuts, gets: d.Gets, putBytes: d.PutBytes, preconditionFailed: d.PreconditionFailed,
		writes: metrics.Sum(r.metrics.ProviderWrites), conflicts: metrics.Sum(r.metrics.ProviderConflicts), duration: took.Sub(start), flags: r.flags}
	r.stop(b)
	return run
}

// azureIdle waits until no reconcile has happened for a second and returns
// when the last one ended.
func azureIdle(rs ...*azureController) time.Time {
	last, lastChange := -1.0, time.Now()
	for time.Since(lastChange) < time.Second {
		n := 0.0
		for _, r := range rs {
			n += metrics.Sum(r.metrics.Reconciles)
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lastChange
}

// azureChurn replaces endpoints of the first `services` Services with
// `writers` controllers running, and reports the Azure writes and conflicts.
func azureChurn(b *testing.B, cfg *rest.Config, c client.Client, emu *azurearm.Emulator, services, writers int) (azureRun, int) {
	b.Helper()
	ctx := context.Background()
	var rs []*azureController
	for i := 0; i < writers; i++ {
		rs = append(rs, azureStart(b, cfg, emu, service.SyncIncremental))
	}
	for metrics.Sum(rs[0].metrics.Reconciles) < float64(len(azureLBs)) {
		time.Sleep(20 * time.Millisecond)
	}
	azureIdle(rs...)
	start := emu.Counters()
	changes := 0
	tick := time.NewTicker(time.Second / azureChurnRate)
	for end := time.Now().Add(azureChurnSeconds * time.Second); time.Now().Before(end); changes++ {
		<-tick.C
		i := changes % services
		var sl discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKey{Namespace: azureNS, Name: azureName(i)}, &sl); err != nil {
			b.Fatal(err)
		}
		azureGen[i]++
		sl.Endpoints = azureSlice(i, azureGen[i]).Endpoints
		if err := c.Update(ctx, &sl); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	azureIdle(rs...)
	d := emu.Counters().Sub(start)
	run := azureRun{puts: d.Puts(), poolPuts: d.PoolPuts, gets: d.Gets, preconditionFailed: d.PreconditionFailed, flags: rs[0].flags}
	for _, r := range rs {
		run.writes += metrics.Sum(r.metrics.ProviderWrites)
		run.conflicts += metrics.Sum(r.metrics.ProviderConflicts)
		r.stop(b)
	}
	return run, changes
}

// azureRules counts zerodrop's rules on the emulated load balancers.
func azureRules(emu *azurearm.Emulator) int {
	n := 0
	for _, name := range azureLBs {
		if lb, ok := emu.LoadBalancer("rg-bench", name); ok {
			n += len(lb.Properties.LoadBalancingRules)
		}
	}
	return n
}

func azureName(i int) string { return fmt.Sprintf("svc-%04d", i) }

func azureService(i int) *corev1.Service {
	return &corev1.Service{
		// A replaced endpoint drains for 2s before it goes, so that the
		// churn settles quickly. IP mode by the annotation (Azure's default
		// is node mode): the bench measures endpoint churn, which node
		// mode does not write, as its published figures did.
		ObjectMeta: metav1.ObjectMeta{Namespace: azureNS, Name: azureName(i), Annotations: map[string]string{"zerodrop.dev/drain-timeout": "2s",
			"zerodrop.dev/backend-mode": "ip"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To(azureClass),
			Selector: map[string]string{"app": azureName(i)},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// azureSlice is Service i's endpoints in generation g: two pod addresses,
// one of which moves on with every generation.
func azureSlice(i, g int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: azureNS, Name: azureName(i), Labels: map[string]string{discoveryv1.LabelServiceName: azureName(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range []string{fmt.Sprintf("10.%d.%d.1", 10+i/250, i%250), fmt.Sprintf("10.%d.%d.%d", 10+i/250, i%250, 2+g%250)} {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}
