package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
)

// replicaWaits are the control role's load balancers that wait for the
// data-plane replicas: a Service of theirs that a replica that counts does
// not serve yet (or none counts), or a deleted one's listener on a replica
// that does not answer. Nothing the control role does ends such a wait —
// the replicas build their HAProxy from the Services on their own — so its
// looks back off: the next look comes as long after this one as the key
// has waited so far, at least the poll interval (a new Service's replicas
// usually serve it by then) and at most max — looks at 1, 2, 4, 8 s …
// after the wait began, then every max. Looks that a change brings in
// between (a Service's status written, a wake) add none of their own. At
// 10,000 Services and no replica counting (an empty DaemonSet, or every
// replica down) a look every second each took more than a core of an idle
// control role (issue 49). What can end a wait wakes the waiting keys at
// once instead (wake): a replica pod's change (one added, its address,
// phase or readiness changed, gone) and a replica answering again after
// failed reads (replicaReads). What neither shows — a replica that serves
// a Service without its pod changing — is seen by the next look, at most
// max later.
type replicaWaits struct {
	poll, max time.Duration
	// window gathers wakes: a burst of pod events (a DaemonSet rollout)
	// looks at the waiting keys once (negative: at once).
	window time.Duration
	// enqueue puts a key in the queue now.
	enqueue func(key string)
	// gauge is zerodrop_load_balancers_waiting_for_replicas (nil: none).
	gauge prometheus.Gauge
	now   func() time.Time

	mu sync.Mutex
	// since is, by waiting key, when a look first found it waiting.
	since map[string]time.Time
	// waking: a wake is scheduled.
	waking bool
}

func newReplicaWaits(poll, max, window time.Duration, enqueue func(string), gauge prometheus.Gauge) *replicaWaits {
	return &replicaWaits{poll: poll, max: max, window: window, enqueue: enqueue, gauge: gauge, now: time.Now, since: map[string]time.Time{}}
}

// waiting records that a look found key waiting for the replicas, and
// returns when to look again.
func (w *replicaWaits) waiting(key string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	since, ok := w.since[key]
	if !ok {
		since = now
		w.since[key] = now
		w.publish()
	}
	return min(max(w.poll, now.Sub(since)), w.max)
}

// done records that key waits no more (served, gone, or polled for
// another reason): a later wait starts again at the poll interval.
func (w *replicaWaits) done(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.since[key]; !ok {
		return
	}
	delete(w.since, key)
	w.publish()
}

func (w *replicaWaits) publish() {
	if w.gauge != nil {
		w.gauge.Set(float64(len(w.since)))
	}
}

// wake looks at every waiting key again soon (after the window), not at
// its back-off's time; the other keys are not touched. A woken key keeps
// its back-off, timed from when its wait began, not from the wake.
func (w *replicaWaits) wake() {
	if w.window < 0 {
		w.wakeNow()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waking {
		return
	}
	w.waking = true
	time.AfterFunc(w.window, w.wakeNow)
}

func (w *replicaWaits) wakeNow() {
	w.mu.Lock()
	w.waking = false
	keys := make([]string, 0, len(w.since))
	for key := range w.since {
		keys = append(keys, key)
	}
	w.mu.Unlock()
	for _, key := range keys {
		w.enqueue(key)
	}
}

// replicaPods says which pods are the data-plane replicas' (Options'
// ReplicaNamespace and ReplicaSelector).
type replicaPods struct {
	namespace string
	selector  labels.Selector
}

func (r replicaPods) is(obj any) bool {
	pod, ok := unwrap(obj).(*corev1.Pod)
	return ok && pod.Namespace == r.namespace && r.selector.Matches(labels.Set(pod.Labels))
}

// replicaPodChanged reports whether a pod update can change what the
// replicas serve or which count: any write of a replica's pod (its
// address, phase, readiness — a replica turns ready once it serves every
// Service —, deletion, labels), not the informer's resync of an unchanged
// one. A data plane has a few pods, written rarely.
func (r replicaPods) changed(old, cur any) bool {
	if !r.is(old) && !r.is(cur) {
		return false
	}
	o, ok1 := unwrap(old).(*corev1.Pod)
	n, ok2 := unwrap(cur).(*corev1.Pod)
	return !ok1 || !ok2 || o.ResourceVersion != n.ResourceVersion
}

// watchReplicaPods wakes the waiting load balancers on every change of a
// data-plane replica's pod (RoleControl with Options.ReplicaSelector).
func (c *Controller) watchReplicaPods(ctx context.Context) error {
	if c.opts.Role != RoleControl || c.opts.ReplicaSelector == nil {
		return nil
	}
	inf, err := c.cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	r := replicaPods{namespace: c.opts.ReplicaNamespace, selector: c.opts.ReplicaSelector}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if r.is(obj) {
				c.waits.wake()
			}
		},
		UpdateFunc: func(old, cur any) {
			if r.changed(old, cur) {
				c.waits.wake()
			}
		},
		DeleteFunc: func(obj any) {
			if r.is(obj) {
				c.waits.wake()
			}
		},
	})
	return err
}
