package podgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// floodPods is how many unservable pods one tenant's namespace holds.
const floodPods = 2000

// TestFloodedNamespaceDoesNotStarveAnother (issue 46, M7): a namespace whose
// 2,000 gated pods are never served, all polled by the gate, delays the gate
// of a servable pod in another namespace by less than 5 s, with the gate's
// default poll interval and read budget. Both sides are measured here: the
// quiet namespace's gate latency before the flood and with it.
func TestFloodedNamespaceDoesNotStarveAnother(t *testing.T) {
	cfg := controlplane.Start(t)
	// The test's own client creates the flood: without client-go's default
	// 5 requests/s that alone would take a quarter of an hour.
	fast := rest.CopyConfig(cfg)
	fast.QPS, fast.Burst = 500, 1000
	c := testutil.Client(t, fast)
	ctx := context.Background()

	prov := memory.New(provider.Hooks{})
	reads := &countingReads{Provider: prov}
	quiet, flood := namespace(t, c, "quiet"), namespace(t, c, "flood")
	for _, ns := range []string{quiet, flood} {
		if err := c.Create(ctx, testutil.LBService(ns, "web", class, 80, 8080)); err != nil {
			t.Fatal(err)
		}
	}
	// The flood's load balancer exists and never registers its pods.
	serve(prov, flood, "web")

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	finder := &lbtarget.Finder{Reader: mgr.GetClient(), Services: classServices{}, Provider: reads}
	// The defaults of PollInterval and ReadQPS: what the command runs with.
	if err := Setup(mgr, Options{Finder: finder, Logger: testr.New(t)}); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	// gateDelay creates a servable pod in the quiet namespace (its load
	// balancer registers it first) and returns how long its gate took to
	// turn True, from before the pod's creation.
	var quietBackends []model.Backend
	gateDelay := func(name, ip string, limit time.Duration) time.Duration {
		t.Helper()
		quietBackends = append(quietBackends, backend(ip, 8080))
		serve(prov, quiet, "web", quietBackends...)
		start := time.Now()
		if _, err := newGatedPod(ctx, c, quiet, name, "web", ip); err != nil {
			t.Fatal(err)
		}
		for time.Since(start) < limit {
			var pod corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: quiet, Name: name}, &pod); err != nil {
				t.Fatal(err)
			}
			if conditionTrue(&pod) {
				return time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return -1
	}
	base := gateDelay("before", "10.9.0.1", 30*time.Second)
	if base < 0 {
		t.Fatal("the quiet namespace's gate did not open within 30s without any flood")
	}
	t.Logf("gate latency in %s without the flood: %s", quiet, base.Round(time.Millisecond))

	created := createFlood(t, c, flood)
	t.Logf("created %d unservable gated pods in %s in %s", floodPods, flood, created.Round(time.Second))
	// The flood is being polled: the gate reads at its budget's rate.
	from := reads.n.Load()
	time.Sleep(3 * time.Second)
	if rate := float64(reads.n.Load()-from) / 3; rate < 10 {
		t.Fatalf("the gate read the provider %.1f times/s during the flood, want about its budget (20/s): the flood is not being polled", rate)
	}

	const bound = 5 * time.Second
	limit := base + bound + 60*time.Second
	flooded := gateDelay("during", "10.9.0.2", limit)
	if flooded < 0 {
		t.Fatalf("with %d unservable pods polled in %s, the gate of a servable pod in %s did not open within %s (%s without the flood)",
			floodPods, flood, quiet, limit.Round(time.Second), base.Round(time.Millisecond))
	}
	t.Logf("gate latency in %s with %d unservable pods polled in %s: %s", quiet, floodPods, flood, flooded.Round(time.Millisecond))
	if d := flooded - base; d >= bound {
		t.Errorf("the flood in %s delayed the gate in %s by %s (%s with it, %s without), want less than %s",
			flood, quiet, d.Round(time.Millisecond), flooded.Round(time.Millisecond), base.Round(time.Millisecond), bound)
	}
}

// countingReads counts the gate's reads of the load balancers' backends.
type countingReads struct {
	*memory.Provider
	n atomic.Int64
}

func (c *countingReads) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	c.n.Add(1)
	return c.Provider.Backends(ctx, key)
}

// createFlood creates floodPods gated, addressed pods in ns that no load
// balancer serves, with a bounded number of concurrent writers and within a
// bounded time, and returns how long it took.
func createFlood(t *testing.T, c client.Client, ns string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				ip := fmt.Sprintf("10.8.%d.%d", i/250, i%250+1)
				if _, err := newGatedPod(ctx, c, ns, fmt.Sprintf("flood-%04d", i), "web", ip); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
	for i := 0; i < floodPods && ctx.Err() == nil; i++ {
		select {
		case names <- i:
		case <-ctx.Done():
		}
	}
	close(names)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("create the flood: %v", firstErr)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("create the flood: %v", err)
	}
	return time.Since(start)
}
