package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testutil"
)

var (
	scaleServices  = flag.Int("scale-n", 0, "LoadBalancer Services for BenchmarkScale (0 skips it)")
	scaleEndpoints = flag.Int("scale-endpoints", 10, "endpoints per Service in BenchmarkScale")
	scaleWorkers   = flag.Int("scale-workers", 0, "controller workers (--workers) in BenchmarkScale (0: the shipped default, 4, which the HAProxy provider widens to haproxy.GroupWidth; a value takes effect only above that)")
	scaleReload    = flag.Duration("scale-reload-timeout", 0, "BenchmarkScale: HAProxy's reload timeout (0: the shipped 10 s, which has no flag)")
	scaleHeap      = flag.String("scale-build-memprofile", "", "BenchmarkScale: write a heap profile at the end of the build (every load balancer served) to `FILE`")
	scaleBuildProf = flag.String("scale-build-cpuprofile", "", "BenchmarkScale: write a CPU profile of the build phase (start to every Service served) to `FILE`")
	scaleProfile   = flag.String("scale-restart-cpuprofile", "", "BenchmarkScale: write a CPU profile of the restart phase (start to every load balancer verified) to `FILE`")
	scaleNoStrict  = flag.Bool("scale-no-strict-limits", false, "BenchmarkScale: HAProxy with `no strict-limits` (--haproxy-no-strict-limits), for more listeners and checked servers than the open-file limit")
)

const (
	scaleNS = "scale"
	// scaleChurned Services get endpoint churn, scaleChurnRate changes a
	// second for scaleChurnSeconds; the others' checks run every
	// scaleQuietInterval (their endpoints do not listen: at the default
	// 2 s, 50,000 failing checks would be the load under test).
	scaleChurned, scaleChurnRate, scaleChurnSeconds = 100, 10, 30
	scaleQuietInterval                              = "10s"
)

// BenchmarkScale measures, on the real apiserver and a real HAProxy, with
// -scale-n LoadBalancer Services of -scale-endpoints endpoints each: building
// every listener from nothing (reloads grouped), the controller's peak RSS,
// a restart (time to verify everything; it must write nothing) and the
// latency from an endpoint change to HAProxy serving the new endpoint under
// churn. The controller runs in this test process; kube-apiserver, etcd and
// HAProxy are separate processes.
func BenchmarkScale(b *testing.B) {
	n := *scaleServices
	if n <= 0 {
		b.Skip("-scale-n 0: BenchmarkScale skipped (make bench BENCH_SCALE_N=5000)")
	}
	if n**scaleEndpoints > 200*250 || n < scaleChurned {
		b.Fatalf("-scale-n %d × -scale-endpoints %d: want %d to 50,000 endpoints (198.18.0.0–198.18.199.0/24)", n, *scaleEndpoints, scaleChurned)
	}
	crlog.SetLogger(logr.Discard())
	raiseFileLimit(b, n)
	env := controlplane.StartEnv(b)
	// No client-side rate limit, as in a cluster (controller-runtime's
	// GetConfig leaves it to the API server's priority and fairness): at 5
	// QPS, client-go's default, the status writes of 5,000 Services alone
	// would take minutes, for the controller and for this test's churn.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}); err != nil {
		b.Fatal(err)
	}
	ch := newChurner(b)
	start := time.Now()
	parallel(b, n, 8, func(i int) error {
		if err := c.Create(ctx, scaleService(i)); err != nil {
			return err
		}
		sl, err := ch.initialSlice(i)
		if err != nil {
			return err
		}
		return c.Create(ctx, sl)
	})
	fmt.Printf("created %d Services and EndpointSlices (%d endpoints) in %s\n", n, n**scaleEndpoints, time.Since(start).Round(time.Millisecond))
	dir := b.TempDir()
	b.Cleanup(func() { stopHAProxy(dir) })

	// Build: every listener from nothing.
	rssReset := resetPeakRSS()
	stopBuildProfile := startProfile(b, *scaleBuildProf)
	build := scaleStart(b, cfg, dir, "build")
	buildTook := build.awaitBuilt(b, n)
	stopBuildProfile()
	lbs, err := build.prov.List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(lbs) != n {
		b.Fatalf("HAProxy serves %d load balancers after the build, want %d", len(lbs), n)
	}
	buildResults := reconcileResults(build.m)
	buildReloads := metrics.Sum(build.m.ProviderWrites.WithLabelValues("haproxy", "reload"))
	buildWrites := metrics.Sum(build.m.ProviderWrites)
	buildMem := readMem()
	writeHeapProfile(b, *scaleHeap)
	build.stop(b)
	buildErrs := build.errs.take()

	// Restart: a new controller verifies everything and writes nothing.
	resetPeakRSS()
	stopProfile := startProfile(b, *scaleProfile)
	restart := scaleStart(b, cfg, dir, "restart")
	restartTook := restart.await(b, n)
	stopProfile()
	restartWrites := metrics.Sum(restart.m.ProviderWrites)
	restartMem := readMem()

	// Churn, on the restarted controller.
	before := reconcileResults(restart.m)
	restartErrs := restart.errs.take()
	lat, missed, changes := ch.run(b, c)
	churnErrs := restart.errs.take()
	during := reconcileResults(restart.m)
	for k := range during {
		during[k] -= before[k]
	}
	churnMem := readMem()
	restart.stop(b)

	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nscale: %d LoadBalancer Services, %d endpoints, real apiserver + HAProxy\n%s\n", n, n**scaleEndpoints, flagsLine(build.flags, restart.flags))
	fmt.Fprintf(w, "build from nothing\t%s\t%.0f reloads, %.0f provider writes; reconciles by result %v\n", buildTook.Round(time.Millisecond), buildReloads, buildWrites, buildResults)
	fmt.Fprintf(w, "restart: time to verify all\t%s\t%.0f provider writes\n", restartTook.Round(time.Millisecond), restartWrites)
	fmt.Fprintf(w, "churn: %d changes/s on %d Services for %d s\t%d changes\tp50 %s, p99 %s, max %s to HAProxy serving the new endpoint; %d not served within %s\n",
		scaleChurnRate, scaleChurned, scaleChurnSeconds, changes,
		percentile(lat, 50), percentile(lat, 99), percentile(lat, 100), missed, churnTimeout)
	fmt.Fprintf(w, "churn: reconciles by result\t%v\n", during)
	fmt.Fprintln(w, "\nmemory of the test process running the controller in-process (kube-apiserver, etcd, HAProxy are other processes)")
	fmt.Fprintln(w, "phase\tpeak RSS (VmHWM)\tRSS now (VmRSS)\tGo heap in use\tGo memory from the OS")
	for _, r := range []struct {
		name string
		m    memReading
	}{{"build", buildMem}, {"restart", restartMem}, {"restart + churn", churnMem}} {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.name, mib(r.m.hwm), mib(r.m.rss), mib(r.m.heapInuse), mib(r.m.sys))
	}
	if !rssReset {
		fmt.Fprintln(w, "(peak RSS could not be reset between phases: it is the peak since the test process started)")
	}
	for _, e := range []struct {
		phase string
		lines []string
	}{{"build", buildErrs}, {"restart", restartErrs}, {"churn", churnErrs}} {
		for i, l := range e.lines {
			if i == 5 {
				fmt.Fprintf(w, "%s: … %d more kinds of error\n", e.phase, len(e.lines)-5)
				break
			}
			fmt.Fprintf(w, "%s: controller logged %s\n", e.phase, l)
		}
	}
	w.Flush()
	// Invariant 1: the bench fails, not only prints, when a restart with
	// nothing changed writes.
	if restartWrites != 0 {
		b.Fatalf("restart with nothing changed made %v provider writes, want 0", restartWrites)
	}
	b.ReportMetric(buildTook.Seconds(), "build-s")
	b.ReportMetric(buildReloads, "build-reloads")
	b.ReportMetric(restartTook.Seconds(), "verify-s")
	b.ReportMetric(float64(percentile(lat, 99).Milliseconds()), "churn-p99-ms")
	b.ReportMetric(float64(buildMem.hwm)/(1<<20), "build-peak-RSS-MiB")
}

// scaleController is one controller (a leader) on the shared HAProxy.
type scaleController struct {
	*benchController
	// cache is the controller's own informer cache, which the build's wait
	// reads.
	cache cache.Cache
	errs  *errorLog
	m     *metrics.Metrics
	prov  provider.Lister
	start time.Time
	flags modeFlags
}

func scaleStart(b *testing.B, rc *rest.Config, dir, name string) *scaleController {
	b.Helper()
	errs := &errorLog{}
	log := logr.New(errs)
	cfg := benchConfig(rc)
	cfg.Override.Logger = &log
	cfg.HAProxy.Dir = dir
	// Overridden only when asked; the flags line says which.
	if *scaleReload > 0 {
		cfg.HAProxy.ReloadTimeout = *scaleReload
	}
	cfg.HAProxy.NoStrictLimits = *scaleNoStrict // --haproxy-no-strict-limits
	if *scaleWorkers > 0 {
		cfg.Workers = *scaleWorkers
	}
	cfg.AddressPool, cfg.AddressMap = "127.0.128.0/17", labAddressMap
	c := startBench(b, cfg)
	// From the manager's start, as before the builder: HAProxy's own start
	// is not the controller's.
	return &scaleController{benchController: c, cache: c.Manager.GetCache(), errs: errs, m: c.Metrics,
		prov: c.Provider.(provider.Lister), start: time.Now(), flags: newModeFlags(name, cfg)}
}

// await waits until n reconciles have ended (a restart's verification of
// every load balancer), and returns how long that took from the start.
func (r *scaleController) await(b *testing.B, n int) time.Duration {
	b.Helper()
	deadline := r.start.Add(60 * time.Minute)
	for {
		got := metrics.Sum(r.m.Reconciles)
		if int(got) >= n {
			return time.Since(r.start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %v of %d load balancers reconciled", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitBuilt waits until every one of the n Services has its load balancer
// address in its status — written only after its load balancer was applied
// and verified — and returns how long that took from the start: what a
// user sees. It reads the controller's own informer cache, which has a
// status only after the API server does, without copying: reading the
// 5,000 Services from the API server every second was a tenth of the test
// process's CPU during the build, beside the controller it measures.
// Counting "applied" reconciles instead can fall short of n — a reconcile
// that fails after its listener was made counts as an error, and its retry,
// finding nothing to do, as a no-op — and a run that waited on that count
// (the first at 50,000 endpoints) sat idle for 5 minutes with all 5,000
// listeners in HAProxy's configuration, not done; whether that was the
// cause was not found (its counters went with it).
func (r *scaleController) awaitBuilt(b *testing.B, n int) time.Duration {
	b.Helper()
	deadline := r.start.Add(60 * time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if !r.cache.WaitForCacheSync(ctx) {
		b.Fatal("the controller's cache did not sync")
	}
	for {
		var list corev1.ServiceList
		if err := r.cache.List(context.Background(), &list, client.InNamespace(scaleNS), client.UnsafeDisableDeepCopy); err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				got++
			}
		}
		if got >= n {
			return time.Since(r.start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d Services have their load balancer", got, n)
		}
		time.Sleep(time.Second)
	}
}

// raiseFileLimit raises this process's open-file limit as far as allowed;
// the HAProxy it starts inherits it. HAProxy needs a descriptor per listener
// and per checked server besides two per connection, sizes its connections
// to the limit, and refuses to start (every reload fails, "Cannot raise FD
// limit" in haproxy.log) when that does not fit: the bench fails at once
// instead when the Services asked for cannot fit, unless
// -scale-no-strict-limits lets HAProxy start under the limit (it says so).
func raiseFileLimit(b *testing.B, n int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	want := lim
	want.Max = max(lim.Max, 1<<20)
	want.Cur = want.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want.Max, want.Cur = lim.Max, lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			b.Fatal(err)
		}
	}
	need := uint64(n * (*scaleEndpoints + 1))
	fmt.Printf("open-file limit %d (HAProxy inherits it); %d listeners and checked servers\n", want.Cur, need)
	if need+1000 <= want.Cur {
		return
	}
	if !*scaleNoStrict {
		b.Fatalf("%d Services × (%d endpoints + 1) need more file descriptors in HAProxy than the limit %d: raise the hard limit (ulimit -Hn), lower -scale-n or -scale-endpoints, or run HAProxy under the limit with -scale-no-strict-limits", n, *scaleEndpoints, want.Cur)
	}
	fmt.Printf("HAProxy runs with no strict-limits: it asks for more descriptors than the limit %d and starts anyway (checks and connections share what there is)\n", want.Cur)
}

// reconcileResults reads zerodrop_reconcile_total by result.
func reconcileResults(m *metrics.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{"noop", "applied", "deleted", "conflict", "error"} {
		out[r] = metrics.Sum(m.Reconciles.WithLabelValues(r))
	}
	return out
}

func parallel(b *testing.B, n, workers int, f func(int) error) {
	b.Helper()
	if err := testutil.Parallel(n, workers, f); err != nil {
		b.Fatal(err)
	}
}

func scaleName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// scaleService is Service i: IP mode without node ports (5,000 Services
// would exhaust the default node-port range), quiet checks unless churned.
func scaleService(i int) *corev1.Service {
	ann := map[string]string{model.AnnotationHealthCheckInterval: scaleQuietInterval}
	if i < scaleChurned {
		// Churned: default checks, and a replaced endpoint drains for 2s.
		ann = map[string]string{model.AnnotationDrainTimeout: "2s"}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNS, Name: scaleName(i), Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("zerodrop.dev/haproxy"),
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app": scaleName(i)},
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// scaleSlice is Service i's EndpointSlice with the given addresses.
func scaleSlice(i int, addrs []string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: scaleNS, Name: scaleName(i), Labels: map[string]string{discoveryv1.LabelServiceName: scaleName(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// staticAddr is endpoint j of Service i, which nothing listens on: in
// 198.18.0.0/16 (published as 127.18.0.0/16), 250 to a /24.
func staticAddr(i, j int) string {
	k := i**scaleEndpoints + j
	return fmt.Sprintf("198.18.%d.%d", k/250, k%250+1)
}

// startProfile starts a CPU profile into path ("" profiles nothing) and
// returns what stops it.
func startProfile(b *testing.B, path string) func() {
	b.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// writeHeapProfile writes the heap profile to path ("" writes nothing).
func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
