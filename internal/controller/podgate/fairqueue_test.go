package podgate

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// TestFairQueueRoundRobin: the gate's queue takes one pod of each namespace
// in turn, so a pod of a quiet namespace queued behind a thousand of a busy
// one is the next but one handed out; within a namespace the order is
// first in, first out; and the work queue's guarantees hold (an item queued
// once however often it is added, one added while being processed handed
// out again after Done, delayed adds).
func TestFairQueueRoundRobin(t *testing.T) {
	q := newFairQueue("", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	for i := 0; i < 1000; i++ {
		q.Add(req("busy", fmt.Sprintf("p%d", i)))
	}
	q.Add(req("busy", "p0")) // already queued: not twice
	q.Add(req("quiet", "q0"))
	q.Add(req("quiet", "q1"))
	if n := q.Len(); n != 1002 {
		t.Fatalf("Len = %d, want 1002", n)
	}
	want := []reconcile.Request{req("busy", "p0"), req("quiet", "q0"), req("busy", "p1"), req("quiet", "q1"), req("busy", "p2"), req("busy", "p3")}
	var got []reconcile.Request
	for range want {
		item, shutdown := q.Get()
		if shutdown {
			t.Fatal("queue shut down")
		}
		got = append(got, item)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("handed out %v, want %v", got, want)
		}
	}
	// busy/p3 is being processed; added again, it waits for Done.
	q.Add(req("busy", "p3"))
	for _, item := range got[:5] {
		q.Done(item)
	}
	q.Done(req("busy", "p3"))
	for i := 4; i < 1000; i++ {
		item, _ := q.Get()
		q.Done(item)
		if i == 999 && item != req("busy", "p999") {
			t.Fatalf("last of the first round: %v, want busy/p999", item)
		}
	}
	if item, _ := q.Get(); item != req("busy", "p3") {
		t.Fatalf("after the queued items: %v, want busy/p3, added again while processed", item)
	}
	q.Done(req("busy", "p3"))
	q.AddAfter(req("later", "l0"), 50*time.Millisecond)
	if item, _ := q.Get(); item != req("later", "l0") {
		t.Fatalf("got %v, want the delayed later/l0", item)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len = %d after everything was handed out, want 0", n)
	}
}

// TestNextCheck: a pod not served yet is checked every PollInterval until
// it has waited ten of them, then a tenth of the time waited later, up to
// MaxPollInterval: a pod served after T is seen by T + T/10 + PollInterval.
func TestNextCheck(t *testing.T) {
	o := Options{PollInterval: 500 * time.Millisecond, MaxPollInterval: 5 * time.Second}
	for _, c := range []struct{ waited, want time.Duration }{
		{0, 500 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{5 * time.Second, 500 * time.Millisecond},
		{6 * time.Second, 600 * time.Millisecond},
		{20 * time.Second, 2 * time.Second},
		{50 * time.Second, 5 * time.Second},
		{time.Hour, 5 * time.Second},
	} {
		if got := o.nextCheck(c.waited); got != c.want {
			t.Errorf("after waiting %s: next check in %s, want %s", c.waited, got, c.want)
		}
	}
}

// TestUnservedPods: the per-namespace gauge counts the pods the gate keeps
// checking and loses a namespace's series once none is left.
func TestUnservedPods(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unserved"}, []string{"namespace"})
	u := newUnservedPods(g)
	a1, a2, b1 := types.NamespacedName{Namespace: "a", Name: "1"}, types.NamespacedName{Namespace: "a", Name: "2"}, types.NamespacedName{Namespace: "b", Name: "1"}
	// Each miss hands the next-check function the delays given so far.
	var asked []time.Duration
	next := func(waited time.Duration) time.Duration {
		asked = append(asked, waited)
		return time.Second
	}
	for i := 1; i <= 3; i++ {
		if n, d := u.miss(a1, next); n != i || d != time.Second {
			t.Fatalf("miss %d of a/1 counted %d, next check in %s", i, n, d)
		}
	}
	if want := []time.Duration{0, time.Second, 2 * time.Second}; !slices.Equal(asked, want) {
		t.Errorf("a/1's misses asked for the next check after %v waited, want %v", asked, want)
	}
	u.miss(a2, next)
	u.miss(b1, next)
	if got := testutil.ToFloat64(g.WithLabelValues("a")); got != 2 {
		t.Errorf("namespace a: %v unserved pods, want 2", got)
	}
	u.forget(a1)
	u.forget(a1) // twice: no effect
	u.forget(b1)
	if got := testutil.ToFloat64(g.WithLabelValues("a")); got != 1 {
		t.Errorf("namespace a: %v unserved pods after one is served, want 1", got)
	}
	g.DeleteLabelValues("a")
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Errorf("%d series left, want none: namespace b's was not dropped when its last pod left", n)
	}
	asked = nil
	if n, _ := u.miss(a1, next); n != 1 || asked[0] != 0 {
		t.Errorf("a/1 checked again after it left: miss counted %d after %v waited, want 1 after 0s", n, asked)
	}
}
