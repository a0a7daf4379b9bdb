package service_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// replicaReads are two data-plane replicas as the control role reads them:
// dp-a, whose state endpoint takes reads and does not answer them (each is
// held until the test ends it, as a read timing out would), and dp-b, which
// answers at once. Both show a Service's listener at the address in its
// status (what a replica serves, once it answers).
type replicaReads struct {
	c client.Client

	mu     sync.Mutex
	silent bool         // dp-a holds its reads
	held   []chan error // dp-a's held reads; each ends with what it is sent
	// dp-a's reads in flight, by load balancer key, and how many started;
	// of those started after the mark (none before it is set), how many are
	// in flight and the most that were at once.
	aInFlight map[string]int
	aStarted  int
	mark      int
	aNew      int
	aMax      int
	// dp-b's reads, by key, and those made while a read of dp-a for the
	// same key was in flight. While rendezvous is set, dp-b answers a read
	// only once dp-a's read of the same key has started (aRead[key] closed)
	// or ctx ends.
	bReads     map[string]int
	overlapped map[string]bool
	rendezvous bool
	aRead      map[string]chan struct{}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// aReadOf is closed once dp-a's read of key has started.
func (r *replicaReads) aReadOf(key string) chan struct{} {
	if r.aRead[key] == nil {
		r.aRead[key] = make(chan struct{})
	}
	return r.aRead[key]
}

type fakeReplica struct {
	provider.Provider // only Observe is called
	name              string
	r                 *replicaReads
}

func (f fakeReplica) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	r := f.r
	if f.name == "dp-b" {
		r.mu.Lock()
		if r.rendezvous {
			ch := r.aReadOf(key)
			r.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			r.mu.Lock()
		}
		r.bReads[key]++
		if r.aInFlight[key] > 0 {
			r.overlapped[key] = true
		}
		r.mu.Unlock()
		return r.serves(ctx, key)
	}
	r.mu.Lock()
	r.aStarted++
	r.aInFlight[key]++
	if ch := r.aReadOf(key); !closed(ch) {
		close(ch)
	}
	counted := r.aStarted > r.mark
	if counted {
		r.aNew++
		r.aMax = max(r.aMax, r.aNew)
	}
	var ch chan error
	if r.silent {
		ch = make(chan error, 1)
		r.held = append(r.held, ch)
	}
	r.mu.Unlock()
	var err error
	if ch != nil {
		select {
		case err = <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	r.mu.Lock()
	r.aInFlight[key]--
	if counted {
		r.aNew--
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r.serves(ctx, key)
}

// serves is the replica's load balancer key: the Service's listener at the
// address in its status (none without one).
func (r *replicaReads) serves(ctx context.Context, key string) (*model.LoadBalancer, error) {
	ns, name, _ := strings.Cut(key, "/")
	var svc corev1.Service
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		return nil, err
	}
	lb := &model.LoadBalancer{Key: key}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		lb.Listeners = append(lb.Listeners, model.Listener{Name: model.ListenerName(ns, name, corev1.ProtocolTCP, 80),
			Address: ing.IP, Port: 80, Protocol: model.TCP})
	}
	return lb, nil
}

// release ends dp-a's held reads with err (nil: they answer).
func (r *replicaReads) release(err error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.held)
	for _, ch := range r.held {
		ch <- err
	}
	r.held = nil
	return n
}

// TestOneReplicaDoesNotStallServices, on the real apiserver with the control
// role: a data-plane replica whose state endpoint does not answer delays no
// Service's address — a new Service gets it while that replica's reads
// hang, with every worker held by them — and its reads are made at the same
// time as the other replica's. Once a read of it has failed (timed out), the
// Services' reconciles no longer wait for it: it counts as not answering
// (Ready stays False, naming it) while at most one read of it is in
// flight, until it answers again; then every Service turns Ready. Counted,
// not timed: the replica's reads are held by the test.
func TestOneReplicaDoesNotStallServices(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	const ns, class = "default", "zerodrop.dev/memory"
	r := &replicaReads{c: c, silent: true, aInFlight: map[string]int{}, bReads: map[string]int{}, overlapped: map[string]bool{},
		rendezvous: true, aRead: map[string]chan struct{}{}, mark: math.MaxInt}
	replicas := func(context.Context) ([]lbtarget.Replica, error) {
		// dp-a first: read one after another, dp-b would wait behind it.
		return []lbtarget.Replica{{Name: "dp-a", Provider: fakeReplica{name: "dp-a", r: r}},
			{Name: "dp-b", Provider: fakeReplica{name: "dp-b", r: r}}}, nil
	}
	startService(t, cfg, service.Options{Provider: memory.New(provider.Hooks{}), Role: service.RoleControl,
		Replicas: replicas, Workers: 2, DrainPollInterval: 100 * time.Millisecond, ResyncPeriod: time.Hour,
		// The test ends dp-a's reads itself.
		ReplicaReadTimeout: time.Hour,
		AddressPool:        netip.MustParsePrefix("127.0.102.0/24")})

	get := func(name string) *corev1.Service {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			t.Fatal(err)
		}
		return &svc
	}
	address := func(name string) string {
		if ing := get(name).Status.LoadBalancer.Ingress; len(ing) > 0 {
			return ing[0].IP
		}
		return ""
	}
	create := func(name string) {
		if err := c.Create(ctx, lbService(ns, name, class, nil)); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Sprintf("dp-a's reads in flight %v, held %d", r.aInFlight, len(r.held))
	}

	// The first Service gets its address, then its reconcile reads both
	// replicas: dp-a's read hangs, dp-b's is made meanwhile (dp-b waits
	// for dp-a's read to start: read one after another, in either order,
	// they never meet).
	create("stall-1")
	eventually(t, 60*time.Second, "stall-1's address and dp-a's read of it hanging", func() (bool, string) {
		r.mu.Lock()
		hanging := r.aInFlight[ns+"/stall-1"] > 0
		r.mu.Unlock()
		return address("stall-1") != "" && hanging, fmt.Sprintf("address %q; %s", address("stall-1"), inFlight())
	})
	eventually(t, 60*time.Second, "dp-b read for stall-1 while dp-a's read of it hangs", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.overlapped[ns+"/stall-1"], fmt.Sprintf("dp-b's reads %v; dp-a's in flight %v", r.bReads, r.aInFlight)
	})
	// A second Service gets its address while dp-a's read of the first
	// still hangs; then its own read of dp-a hangs too: both workers wait.
	create("stall-2")
	eventually(t, 60*time.Second, "stall-2's address while dp-a's read of stall-1 hangs", func() (bool, string) {
		return address("stall-2") != "", fmt.Sprintf("address %q; %s", address("stall-2"), inFlight())
	})
	r.mu.Lock()
	if r.aInFlight[ns+"/stall-1"] == 0 {
		t.Fatalf("dp-a's read of stall-1 ended before the test ended it: %v", r.aInFlight)
	}
	r.mu.Unlock()
	eventually(t, 60*time.Second, "dp-a's read of stall-2 hanging", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.aInFlight[ns+"/stall-2"] > 0, fmt.Sprintf("dp-a's reads in flight %v", r.aInFlight)
	})

	// dp-a's reads time out. From then on the reconciles do not wait for
	// dp-a: six more Services get their addresses and are read again and
	// again on dp-b, while at most one read of dp-a is in flight.
	r.mu.Lock()
	r.mark = r.aStarted
	r.rendezvous = false
	r.mu.Unlock()
	if n := r.release(errors.New("read timed out (test)")); n != 2 {
		t.Errorf("%d of dp-a's reads held when they timed out, want 2 (one per worker)", n)
	}
	names := []string{"stall-1", "stall-2"}
	for i := 3; i <= 8; i++ {
		name := fmt.Sprintf("stall-%d", i)
		create(name)
		names = append(names, name)
	}
	eventually(t, 90*time.Second, "every Service with its address, Ready False naming dp-a, read on dp-b at least twice", func() (bool, string) {
		for _, name := range names {
			svc := get(name)
			ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)
			r.mu.Lock()
			reads := r.bReads[ns+"/"+name]
			r.mu.Unlock()
			if len(svc.Status.LoadBalancer.Ingress) == 0 || ready == nil || ready.Reason != service.ReasonDataPlanePending ||
				!strings.Contains(ready.Message, "dp-a (not answering") || reads < 2 {
				return false, fmt.Sprintf("%s: ingress %v, Ready %+v, read %d times on dp-b; %s", name, svc.Status.LoadBalancer.Ingress, ready, reads, inFlight())
			}
		}
		return true, ""
	})
	r.mu.Lock()
	started, most := r.aStarted-r.mark, r.aMax
	r.mu.Unlock()
	if most > 1 || started > 1 {
		t.Errorf("after dp-a's reads timed out, %d more of its reads started and %d were in flight at once, want at most one (the Services' reconciles must not wait for it)", started, most)
	}

	// dp-a answers again: every Service turns Ready.
	r.mu.Lock()
	r.silent = false
	r.mu.Unlock()
	r.release(nil)
	eventually(t, 90*time.Second, "every Service Ready once dp-a answers", func() (bool, string) {
		for _, name := range names {
			if ready := meta.FindStatusCondition(get(name).Status.Conditions, service.ConditionReady); ready == nil || ready.Status != "True" {
				return false, fmt.Sprintf("%s: Ready %+v; %s", name, ready, inFlight())
			}
		}
		return true, ""
	})
}
