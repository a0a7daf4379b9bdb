package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestStolenLeaseStopsWrites: a leader whose Lease another holder takes
// stops leading — `zerodrop controller` returns "leader election lost" —
// and writes nothing to HAProxy afterwards, whatever changes.
func TestStolenLeaseStopsWrites(t *testing.T) {
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	const ns, name, leaseName = "default", "web", "zerodrop-steal-test"
	if err := c.Create(ctx, testutil.LBService(ns, name, "zerodrop.dev/haproxy", 80, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.Slice(ns, name, 8080, "198.18.62.1")); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	cfg := Config{
		RESTConfig:      restCfg,
		Provider:        "haproxy",
		Sync:            "incremental",
		Workers:         2,
		AddressPool:     "127.0.102.0/24",
		AddressMap:      "198.18.0.0/15=127.18.0.0/15",
		ResyncPeriod:    time.Hour,
		MetricsAddr:     "0",
		ProbeAddr:       "0",
		LeaderElect:     true,
		LeaderNamespace: "kube-system",
		LeaderID:        leaseName,
		LeaseDuration:   4 * time.Second,
		RenewDeadline:   3 * time.Second,
		RetryPeriod:     500 * time.Millisecond,
		HAProxy:         haproxy.Options{Dir: dir},
		Registerer:      reg,
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- RunConfig(runCtx, cfg) }()

	// A second Provider on the same HAProxy reads what the controller did.
	obs, err := haproxy.New(ctx, haproxy.Options{Dir: dir, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	key := ns + "/" + name
	testutil.Eventually(t, 60*time.Second, "the leader to create the load balancer", func() (bool, string) {
		lb, err := obs.Observe(ctx, key)
		return len(testutil.Backends(lb)) == 1, fmt.Sprintf("backends=%v err=%v", testutil.Backends(lb), err)
	})

	// Another holder takes the Lease, as a replica that saw it expire would.
	var lease coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: leaseName}, &lease); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity = ptr.To("thief")
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(3600))
	if err := c.Update(ctx, &lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "leader election lost") {
			t.Fatalf("controller returned %v, want leader election lost", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the controller keeps running after its Lease was taken")
	}
	writes := providerWrites(t, reg)

	// A change the old leader would act on if it were still writing.
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-slice"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.62.2"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := c.Update(ctx, &sl); err != nil {
		t.Fatal(err)
	}
	// Long enough for a live leader to act many times (coalesce window
	// 250 ms, retry period 500 ms).
	time.Sleep(5 * time.Second)
	if now := providerWrites(t, reg); now != writes {
		t.Fatalf("writes after losing the lease: %v, then %v", writes, now)
	}
	lb, err := obs.Observe(ctx, key)
	if err != nil || len(testutil.Backends(lb)) != 1 {
		t.Fatalf("HAProxy changed after the leader lost its lease: %v (%v)", testutil.Backends(lb), err)
	}
}

// providerWrites sums zerodrop_provider_writes_total.
func providerWrites(t *testing.T, reg *prometheus.Registry) float64 {
	return counterSum(t, reg, "zerodrop_provider_writes_total")
}

// counterSum sums the counter name over its labels.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
