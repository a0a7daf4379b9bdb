package service

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// TestReplicaWaitBackoff: a key that keeps waiting for the replicas is
// looked at again as long after a look as it has waited, from the poll
// interval (1 s) to max (10 s); looks in between (a change) add none of
// their own; one that stops waiting starts again at the poll interval.
func TestReplicaWaitBackoff(t *testing.T) {
	var at time.Duration // since the test's epoch
	epoch := time.Unix(1_000_000, 0)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	w := newReplicaWaits(time.Second, 10*time.Second, -1, func(string) {}, gauge)
	w.now = func() time.Time { return epoch.Add(at) }
	s := time.Second
	for i, step := range []struct {
		at   time.Duration
		key  string
		done bool
		want time.Duration
	}{
		{at: 0, key: "a", want: s},
		{at: s, key: "a", want: s},
		{at: 2 * s, key: "a", want: 2 * s},
		// A change looks in between: still timed from the wait's start.
		{at: 2500 * time.Millisecond, key: "a", want: 2500 * time.Millisecond},
		{at: 4 * s, key: "a", want: 4 * s},
		{at: 8 * s, key: "a", want: 8 * s},
		{at: 16 * s, key: "a", want: 10 * s},
		{at: 5 * time.Minute, key: "a", want: 10 * s},
		{at: 5 * time.Minute, key: "b", want: s},
		// Served: a new wait starts over.
		{at: 6 * time.Minute, key: "a", done: true},
		{at: 6 * time.Minute, key: "a", want: s},
		{at: 6*time.Minute + 3*s, key: "a", want: 3 * s},
	} {
		at = step.at
		if step.done {
			w.done(step.key)
			continue
		}
		if got := w.waiting(step.key); got != step.want {
			t.Errorf("step %d: %s at %s: next look after %s, want %s", i, step.key, step.at, got, step.want)
		}
	}
	if got := promtest.ToFloat64(gauge); got != 2 {
		t.Errorf("waiting gauge %v, want 2 (a and b)", got)
	}
	w.done("b")
	w.done("b")
	if got := promtest.ToFloat64(gauge); got != 1 {
		t.Errorf("waiting gauge %v after b was served, want 1", got)
	}
}

// TestReplicaWaitWakesOnlyWaitingKeys: a wake enqueues the keys that wait
// for the replicas, not the others (served, or polled for a drain), and a
// burst of wakes within the window enqueues them once.
func TestReplicaWaitWakesOnlyWaitingKeys(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	woken := make(chan struct{}, 16)
	enqueue := func(key string) {
		mu.Lock()
		got = append(got, key)
		mu.Unlock()
		woken <- struct{}{}
	}
	w := newReplicaWaits(time.Second, 10*time.Second, 50*time.Millisecond, enqueue, nil)
	for _, key := range []string{"ns/a", "ns/b", "ns/served"} {
		w.waiting(key)
	}
	w.done("ns/served")
	for range 5 {
		w.wake()
	}
	for range 2 {
		select {
		case <-woken:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting keys were not woken")
		}
	}
	// A second wake after the first fired enqueues them again: the
	// window gathers a burst, it does not drop a later change.
	w.wake()
	for range 2 {
		select {
		case <-woken:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting keys were not woken by a second wake")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(got)
	if want := []string{"ns/a", "ns/a", "ns/b", "ns/b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("enqueued %v, want %v (each waiting key once per gathered wake, the served one never)", got, want)
	}
}

// TestReplicaPodChanged: which pod events wake the waiting keys — every
// write of a pod the data-plane selector matches in its namespace (also
// one that leaves or joins the selector), none of another pod and no
// resync of an unchanged one.
func TestReplicaPodChanged(t *testing.T) {
	r := replicaPods{namespace: "zerodrop", selector: labels.SelectorFromSet(labels.Set{"app": "dp"})}
	pod := func(ns, app, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", ResourceVersion: rv, Labels: map[string]string{"app": app}}}
	}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"replica written", pod("zerodrop", "dp", "1"), pod("zerodrop", "dp", "2"), true},
		{"replica resync", pod("zerodrop", "dp", "1"), pod("zerodrop", "dp", "1"), false},
		{"leaves the selector", pod("zerodrop", "dp", "1"), pod("zerodrop", "web", "2"), true},
		{"joins the selector", pod("zerodrop", "web", "1"), pod("zerodrop", "dp", "2"), true},
		{"another pod", pod("zerodrop", "web", "1"), pod("zerodrop", "web", "2"), false},
		{"same labels, another namespace", pod("default", "dp", "1"), pod("default", "dp", "2"), false},
	} {
		if got := r.changed(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
	if !r.is(toolscache.DeletedFinalStateUnknown{Obj: pod("zerodrop", "dp", "3")}) {
		t.Error("a replica pod's tombstone is not a replica pod")
	}
}

// flakyReplica fails its reads until ok is set.
type flakyReplica struct {
	provider.Provider
	mu sync.Mutex
	ok bool
}

func (f *flakyReplica) Observe(context.Context, string) (*model.LoadBalancer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ok {
		return nil, errors.New("connection refused (test)")
	}
	return nil, nil
}

// TestReplicaAnsweringAgainWakes: the probe of a replica whose reads
// failed calls answered when it finds it answering again — not while it
// still fails.
func TestReplicaAnsweringAgainWakes(t *testing.T) {
	answered := make(chan struct{}, 4)
	r := newReplicaReads(time.Minute, func() { answered <- struct{}{} })
	f := &flakyReplica{}
	rs := []lbtarget.Replica{{Name: "dp-a", Provider: f}}
	ctx := context.Background()
	if _, unread := r.observe(ctx, rs, "ns/a"); unread["dp-a"] == nil {
		t.Fatal("a failed read is not counted as not answering")
	}
	// The next look skips it and starts a probe, which fails.
	r.observe(ctx, rs, "ns/a")
	probing := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.down["dp-a"] != nil && r.down["dp-a"].probing
	}
	for deadline := time.Now().Add(30 * time.Second); probing(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not end")
		}
	}
	select {
	case <-answered:
		t.Fatal("answered while the replica still fails")
	default:
	}
	f.mu.Lock()
	f.ok = true
	f.mu.Unlock()
	r.observe(ctx, rs, "ns/a") // skipped (down): starts a probe
	select {
	case <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("answering again did not wake the waiting keys")
	}
	if _, unread := r.observe(ctx, rs, "ns/a"); len(unread) != 0 {
		t.Errorf("after answering again, unread %v", unread)
	}
}
