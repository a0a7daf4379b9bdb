package podgate

import (
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The gate's work queue hands out pods round-robin across namespaces (issue
// 46, M7). Every check of a pod costs one read of the shared budget
// (Options.ReadQPS) and the controller spends it in queue order: with a
// first-in-first-out queue, one tenant's thousands of pods that are never
// served, each checked again and again, keep the queue full and put another
// namespace's pod behind all of them. Taking one pod of each namespace in
// turn gives every namespace with pods waiting an equal share of the reads,
// however many pods the others have, without raising the budget: a new pod
// waits for at most one check of each other namespace.

// newFairQueue is the controller's work queue: client-go's rate-limiting
// and delaying queues (retries after errors, RequeueAfter) over a base queue
// whose order is namespaceRoundRobin. The base queue keeps the work queue's
// guarantees: an item is queued once however often it is added, and never
// handed to two workers at once.
func newFairQueue(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{
		Name: name, Queue: newNamespaceRoundRobin()})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{
		Name: name, Queue: base})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
		Name: name, DelayingQueue: delaying})
}

// namespaceRoundRobin is a workqueue.Queue: one first-in-first-out list per
// namespace, and the namespaces that have items in a ring; Pop takes the
// first item of the ring's first namespace and moves that namespace to the
// ring's end. The base queue calls it under its lock only, and pushes an
// item only when it is not queued already.
type namespaceRoundRobin struct {
	lists map[string][]reconcile.Request
	// ring holds each namespace with items once, the next to serve first.
	ring []string
	n    int
}

var _ workqueue.Queue[reconcile.Request] = (*namespaceRoundRobin)(nil)

func newNamespaceRoundRobin() *namespaceRoundRobin {
	return &namespaceRoundRobin{lists: map[string][]reconcile.Request{}}
}

// Touch keeps an item that is added again where it is: moving it back would
// let a namespace's own events postpone its pods, moving it forward would
// let them jump the other namespaces.
func (q *namespaceRoundRobin) Touch(reconcile.Request) {}

func (q *namespaceRoundRobin) Push(item reconcile.Request) {
	ns := item.Namespace
	if len(q.lists[ns]) == 0 {
		q.ring = append(q.ring, ns)
	}
	q.lists[ns] = append(q.lists[ns], item)
	q.n++
}

func (q *namespaceRoundRobin) Len() int { return q.n }

// Pop is only called with Len() > 0.
func (q *namespaceRoundRobin) Pop() reconcile.Request {
	ns := q.ring[0]
	q.ring[0] = ""
	q.ring = q.ring[1:]
	list := q.lists[ns]
	item := list[0]
	list[0] = reconcile.Request{}
	if list = list[1:]; len(list) > 0 {
		q.lists[ns] = list
		q.ring = append(q.ring, ns)
	} else {
		// Dropped, not kept empty: the map holds only namespaces with
		// work, however many namespaces ever had some.
		delete(q.lists, ns)
	}
	q.n--
	return item
}
