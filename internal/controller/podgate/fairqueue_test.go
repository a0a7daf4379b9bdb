package podgate

import (
	"fmt"
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

// TestNextCheck: the first checks of a pod not served yet come every
// PollInterval, then they back off, doubling, up to MaxPollInterval.
func TestNextCheck(t *testing.T) {
	o := Options{PollInterval: 500 * time.Millisecond, MaxPollInterval: 5 * time.Second}
	want := []time.Duration{500, 500, 500, 500, 1000, 2000, 4000, 5000, 5000, 5000}
	for i, w := range want {
		if got := o.nextCheck(i + 1); got != w*time.Millisecond {
			t.Errorf("after %d misses: next check in %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if got := o.nextCheck(1 << 20); got != 5*time.Second {
		t.Errorf("after a million misses: %s, want the cap 5s", got)
	}
}

// TestUnservedPods: the per-namespace gauge counts the pods the gate keeps
// checking and loses a namespace's series once none is left.
func TestUnservedPods(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unserved"}, []string{"namespace"})
	u := newUnservedPods(g)
	a1, a2, b1 := types.NamespacedName{Namespace: "a", Name: "1"}, types.NamespacedName{Namespace: "a", Name: "2"}, types.NamespacedName{Namespace: "b", Name: "1"}
	for i := 1; i <= 3; i++ {
		if n := u.miss(a1); n != i {
			t.Fatalf("miss %d of a/1 counted %d", i, n)
		}
	}
	u.miss(a2)
	u.miss(b1)
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
	if n := u.miss(a1); n != 1 {
		t.Errorf("a/1 checked again after it left: miss counted %d, want 1", n)
	}
}
