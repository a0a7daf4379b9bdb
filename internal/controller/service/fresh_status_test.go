package service_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// idleReplica is a data-plane replica that answers every read and serves
// nothing: a Service it counts for stays unserved.
type idleReplica struct {
	provider.Provider // only Observe is called
	reads             func(key string)
}

func (r idleReplica) Observe(_ context.Context, key string) (*model.LoadBalancer, error) {
	r.reads(key)
	return nil, nil
}

// TestNewServiceStatusWrittenOnce, on the real apiserver with the control
// role: a new Service's status (its address, Ready False) is written once
// while no data-plane replica serves it — its next looks, which read the
// replicas and find them still without it, write nothing. Written in other
// words first, every new Service's status was written again a second
// later, and a control role restarted before those writes were done made
// them in its first pass (at 10,000 Services, most of its restart). With a
// replica that counts and with none at all (the control role alone).
// Counted, not timed: the test waits for looks, then compares the Service's
// resourceVersion.
func TestNewServiceStatusWrittenOnce(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class = "default", "zerodrop.dev/memory"

	var mu sync.Mutex
	withReplica := true
	looks := 0                // the replicas' list read: once a look
	reads := map[string]int{} // dp-a's reads, by load balancer key
	replicas := func(context.Context) ([]lbtarget.Replica, error) {
		mu.Lock()
		defer mu.Unlock()
		looks++
		if !withReplica {
			return nil, nil
		}
		return []lbtarget.Replica{{Name: "dp-a", Provider: idleReplica{reads: func(key string) {
			mu.Lock()
			defer mu.Unlock()
			reads[key]++
		}}}}, nil
	}
	startService(t, cfg, service.Options{Provider: memory.New(provider.Hooks{}), Role: service.RoleControl,
		Replicas: replicas, DrainPollInterval: 50 * time.Millisecond, ResyncPeriod: time.Hour,
		AddressPool: netip.MustParsePrefix("127.0.103.0/24")})

	wc, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) *corev1.Service {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			t.Fatal(err)
		}
		return &svc
	}
	for _, tc := range []struct {
		name    string
		replica bool
		want    string // in the Ready condition's message
	}{
		{"fresh-replica", true, "dp-a (listener default/fresh-replica/"},
		{"fresh-alone", false, "no data-plane replica counts"},
	} {
		mu.Lock()
		withReplica = tc.replica
		mu.Unlock()
		// Every write of the Service after its creation, as the apiserver
		// sends it: the finalizer's, then the status's.
		var (
			wmu    sync.Mutex
			writes []*corev1.Service
		)
		w, err := wc.Watch(ctx, &corev1.ServiceList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": tc.name})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ev := range w.ResultChan() {
				if svc, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Modified {
					wmu.Lock()
					writes = append(writes, svc)
					wmu.Unlock()
				}
			}
		}()
		withAddress := func() (n int, last *corev1.Service) {
			wmu.Lock()
			defer wmu.Unlock()
			for _, svc := range writes {
				if len(svc.Status.LoadBalancer.Ingress) > 0 {
					n, last = n+1, svc
				}
			}
			return n, last
		}
		if err := c.Create(ctx, lbService(ns, tc.name, class, nil)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, tc.name+"'s address", func() (bool, string) {
			n, _ := withAddress()
			return n > 0, "no write with the address yet"
		})
		// The looks after the first write: each reads the replicas' list
		// (and reads dp-a, where it counts).
		mu.Lock()
		mark, readMark := looks, reads[ns+"/"+tc.name]
		mu.Unlock()
		eventually(t, 60*time.Second, tc.name+" looked at three more times", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			more := looks-mark >= 3
			if tc.replica {
				more = more && reads[ns+"/"+tc.name]-readMark >= 3
			}
			return more, fmt.Sprintf("looks %d (from %d), dp-a's reads of it %d (from %d)", looks, mark, reads[ns+"/"+tc.name], readMark)
		})
		// A write the last look made has reached the watch by the time
		// the Service read after it shows it.
		now := get(tc.name)
		eventually(t, 30*time.Second, tc.name+"'s writes seen by the watch", func() (bool, string) {
			_, last := withAddress()
			return last != nil && last.ResourceVersion == now.ResourceVersion, fmt.Sprintf("watched up to %v, the Service at %s", last != nil, now.ResourceVersion)
		})
		w.Stop()
		ready := meta.FindStatusCondition(now.Status.Conditions, service.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != service.ReasonDataPlanePending || !strings.Contains(ready.Message, tc.want) {
			t.Errorf("%s: Ready %+v, want False, %s, naming %q", tc.name, ready, service.ReasonDataPlanePending, tc.want)
		}
		if n, _ := withAddress(); n != 1 {
			wmu.Lock()
			var seen []string
			for _, svc := range writes {
				seen = append(seen, fmt.Sprintf("%s: ingress %v, Ready %+v", svc.ResourceVersion, svc.Status.LoadBalancer.Ingress,
					meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)))
			}
			wmu.Unlock()
			t.Errorf("%s: %d writes of its status with the address while no replica served it, want 1 (the looks after it find nothing new):\n%s",
				tc.name, n, strings.Join(seen, "\n"))
		}
	}
}
