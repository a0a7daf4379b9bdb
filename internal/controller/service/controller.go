// Package service is zerodrop's Service LoadBalancer controller. Its reconcile
// is a diff between the load balancer the Services ask for and the one the
// provider reports, so a restart, a leader failover or a resync with nothing
// changed writes nothing (invariant 1). Every change to one load balancer —
// from a Service, its EndpointSlices, Nodes or a deletion — goes through one
// work item keyed by the load balancer (invariant 2).
package service

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Names visible to users.
const (
	// Finalizer keeps a Service until its load balancer is gone.
	Finalizer = "zerodrop.dev/load-balancer-cleanup"
	// AnnotationFinalizedBy is set with Finalizer to the class of the
	// controller that put it on: only that controller removes it. Outside
	// the zerodrop.dev/ prefix, whose keys are the user's to set (and any
	// unknown one is refused).
	AnnotationFinalizedBy = "controller.zerodrop.dev/finalized-by"
	// ConditionReady is True once the load balancer serves the Service.
	ConditionReady = "zerodrop.dev/LoadBalancerReady"
	// ConditionConfigValid is False while the Service asks for something
	// zerodrop cannot do (bad annotations, unsupported protocol).
	ConditionConfigValid = "zerodrop.dev/ConfigValid"
	// ClassPrefix prefixes spec.loadBalancerClass: zerodrop.dev/<provider>.
	ClassPrefix = "zerodrop.dev/"

	serviceKeyIndex = "zerodrop.lbKey"
	// sliceServiceIndex indexes EndpointSlices by their Service's name
	// (within their namespace).
	sliceServiceIndex = "zerodrop.serviceName"
)

// Controller reconciles the load balancers of LoadBalancer Services.
type Controller struct {
	opts    Options
	client  client.Client
	cache   cache.Cache
	queue   workqueue.TypedRateLimitingInterface[string]
	retries workqueue.TypedRateLimiter[string] // the queue's (When for a refused load balancer)
	alloc   *allocator
	limiter *rate.Limiter
	drains  *drainClock

	replicaReads *replicaReads
	// waits are RoleControl's load balancers waiting for the replicas.
	waits *replicaWaits
	// checks fits health checks into model.Limits across load balancers.
	checks *checkLedger

	mu       sync.Mutex
	failures map[string]int
	// first are the load balancers Start's first pass enqueued that have
	// not been reconciled without error yet (nil before Start); Synced
	// reports it empty.
	first map[string]bool
	// notBefore holds a throttled load balancer until the time its
	// provider said (provider.RetryAfterError): see processNext.
	notBefore map[string]time.Time
	backends  map[string]map[model.BackendState]int // per load balancer, as last written or verified
	totals    map[model.BackendState]int            // their sum, zerodrop_backends
	// defaultMode is the provider's backend mode for a Service whose
	// annotation names none (provider.DefaultBackendMode).
	defaultMode model.BackendMode
}

// New creates the controller and adds it to mgr. It runs only in the leader;
// standby replicas keep warm informer caches (the manager's cache is started in
// every replica) and fill the queue so that a new leader starts at once.
func New(ctx context.Context, mgr manager.Manager, opts Options) (*Controller, error) {
	if opts.Provider == nil {
		return nil, fmt.Errorf("service controller: no provider")
	}
	switch opts.Role {
	case RoleAll:
	case RoleControl:
		if opts.Replicas == nil {
			return nil, fmt.Errorf("service controller: role %s needs the data-plane replicas", opts.Role)
		}
	case RoleDataPlane:
		// Addresses are the control role's, read from the Services'
		// status; the pool only says which of them a replica may bind.
		opts.StatusPool, opts.AddressPool = opts.AddressPool, netip.Prefix{}
	default:
		return nil, fmt.Errorf("service controller: unknown role %q", opts.Role)
	}
	if opts.LoadBalancerClass == "" {
		opts.LoadBalancerClass = ClassPrefix + opts.Provider.Name()
	}
	if opts.Sync == "" {
		opts.Sync = SyncIncremental
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.KeyFunc == nil {
		opts.KeyFunc = func(s *corev1.Service) string { return s.Namespace + "/" + s.Name }
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = 10 * time.Minute
	}
	if opts.ReadQPS <= 0 {
		opts.ReadQPS = 50
	}
	if opts.ReadBurst <= 0 {
		opts.ReadBurst = 100
	}
	if opts.CoalesceWindow == 0 {
		opts.CoalesceWindow = 250 * time.Millisecond
	}
	if opts.DrainPollInterval <= 0 {
		opts.DrainPollInterval = time.Second
	}
	if opts.MaxReplicaWait <= 0 {
		opts.MaxReplicaWait = 10 * opts.DrainPollInterval
	}
	if opts.FailureEventThreshold <= 0 {
		opts.FailureEventThreshold = 5
	}
	if opts.Metrics == nil {
		m, err := metrics.New(nil)
		if err != nil {
			return nil, err
		}
		opts.Metrics = m
	}
	if opts.Recorder == nil {
		opts.Recorder = mgr.GetEventRecorder("zerodrop-service-controller")
	}
	opts.Recorder = truncatingRecorder{opts.Recorder}
	retries := retryLimiter()
	c := &Controller{
		opts:    opts,
		client:  mgr.GetClient(),
		cache:   mgr.GetCache(),
		retries: retries,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			retries,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "zerodrop_load_balancers"}),
		alloc:     newAllocator(opts.AddressPool),
		limiter:   rate.NewLimiter(rate.Limit(opts.ReadQPS), opts.ReadBurst),
		failures:  map[string]int{},
		notBefore: map[string]time.Time{},
		drains:    newDrainClock(),
		checks:    newCheckLedger(opts.Limits),

		defaultMode: provider.DefaultBackendMode(opts.Provider),
	}
	// RoleControl's reads of the data-plane replicas, and its load
	// balancers waiting for them: one answering again may end a wait.
	c.waits = newReplicaWaits(opts.DrainPollInterval, opts.MaxReplicaWait, opts.CoalesceWindow,
		func(key string) { c.queue.Add(key) }, opts.Metrics.WaitingForReplicas)
	c.replicaReads = newReplicaReads(opts.ReplicaReadTimeout, c.waits.wake)
	// Services are found by load balancer key through an index, so a
	// reconcile does not scan every Service.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, serviceKeyIndex, func(o client.Object) []string {
		svc := o.(*corev1.Service)
		if c.managed(svc) || hasFinalizer(svc) {
			return []string{c.opts.KeyFunc(svc)}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("index services: %w", err)
	}
	// A Service's EndpointSlices too: a label selector would be matched
	// against every slice in the namespace on each reconcile, which at 5,000
	// Services in one namespace was half the CPU time of a restart.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, func(o client.Object) []string {
		if name := o.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
			return []string{name}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("index endpointslices: %w", err)
	}
	if err := c.watch(ctx); err != nil {
		return nil, err
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add service controller: %w", err)
	}
	return c, nil
}

// NeedLeaderElection makes the manager run the workers only in the leader,
// except in a data-plane replica: each is the only writer of its own load
// balancer.
func (c *Controller) NeedLeaderElection() bool { return c.opts.Role != RoleDataPlane }

// Start runs the workers until ctx is done.
func (c *Controller) Start(ctx context.Context) error {
	log := c.opts.Logger.WithName("service")
	// Invariant 4: no plan before every informer has synced; a half-filled
	// EndpointSlice cache would empty pools.
	if !c.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("service controller: caches did not sync")
	}
	if err := c.seedAllocator(ctx); err != nil {
		return err
	}
	if err := c.seedChecks(ctx); err != nil {
		return fmt.Errorf("service controller: health-check demands: %w", err)
	}
	log.Info("leading: reconciling load balancers", "sync", c.opts.Sync, "workers", c.workers())
	first := map[string]bool{}
	for _, key := range c.enqueueAll(ctx) {
		first[key] = true
	}
	c.mu.Lock()
	c.first = first
	c.mu.Unlock()

	var wg sync.WaitGroup
	for i := 0; i < c.workers(); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	ticker := time.NewTicker(c.opts.ResyncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			c.queue.ShutDown()
			wg.Wait()
			return nil
		case <-ticker.C:
			c.enqueueAll(ctx)
		}
	}
}

// workers is how many load balancers are reconciled at once: Workers, or,
// where the provider joins concurrent writes into one (provider.Grouper),
// its GroupWidth when wider. How many calls can join one write is how many
// run at once: at Workers (4) a replica that builds 5,000 load balancers
// from nothing made 1,250 HAProxy reloads (41 min), and endpoint churn on
// 5,000 reached HAProxy after 35 s at 10 changes a second, each mirror of
// the whole configuration carrying at most four.
func (c *Controller) workers() int {
	if g, ok := c.opts.Provider.(provider.Grouper); ok {
		return max(c.opts.Workers, g.GroupWidth())
	}
	return c.opts.Workers
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	// The queue hands one key to one worker at a time: this is the single
	// writer of that load balancer. The provider is called outside any lock.
	defer c.queue.Done(key)
	// A stopping controller starts no reconcile: after ShutDown the queue
	// still hands out every key it holds, and a control role at 10,000
	// Services waiting for data-plane replicas held thousands (each polled
	// every DrainPollInterval then) — worked through, they outlasted the
	// manager's 30 s grace period and the process exited with an error.
	// What was queued is looked at again by the next leader.
	if ctx.Err() != nil {
		return false
	}
	// A throttled load balancer waits out the provider's Retry-After even
	// when an event (an endpoint change) enqueues it meanwhile: a call made
	// sooner is throttled again and spends the bucket the wait refills
	// (seen against the emulator's ARM buckets: 9 to 13 of 11 to 15 retries
	// made early). It runs at the time given, from the state then.
	if wait := c.held(key); wait > 0 {
		c.queue.AddAfter(key, wait)
		return true
	}
	again, err := c.reconcileKey(ctx, key)
	// A load balancer the provider refuses leaves the first pass as done:
	// the replica serves the others, and is ready (provider.ErrRefused).
	if err == nil || errors.Is(err, provider.ErrRefused) {
		c.mu.Lock()
		delete(c.first, key)
		c.mu.Unlock()
	}
	var retry *provider.RetryAfterError
	switch {
	case err == nil && again > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, again)
	case err == nil:
		c.queue.Forget(key)
	case errors.As(err, &retry):
		c.mu.Lock()
		c.notBefore[key] = time.Now().Add(retry.After)
		c.mu.Unlock()
		c.queue.AddAfter(key, retry.After)
	case errors.Is(err, provider.ErrRefused):
		// The same input fails the same way until it changes (an event
		// runs the key at once) or its cause does (a port freed): a retry
		// sooner only repeats the refusal, and at HAProxy each one is a
		// reload of the whole configuration — back to back, seconds of
		// CPU each at thousands of Services, ahead of every other
		// Service's change.
		c.queue.AddAfter(key, max(c.retries.When(key), refusedRetryDelay))
	default:
		c.queue.AddRateLimited(key)
	}
	return true
}

// held is how long key must still wait after a throttled call (zero when
// it need not).
func (c *Controller) held(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.notBefore[key]
	if !ok {
		return 0
	}
	if wait := time.Until(until); wait > 0 {
		return wait
	}
	delete(c.notBefore, key)
	return 0
}

// Managed reports whether zerodrop owns the Service's load balancer.
func (c *Controller) Managed(svc *corev1.Service) bool { return c.managed(svc) }

// Key returns the load balancer key of a Service.
func (c *Controller) Key(svc *corev1.Service) string { return c.opts.KeyFunc(svc) }

// managed reports whether zerodrop owns the Service's load balancer. A
// gate-only Service never is, whatever its class: another controller writes
// its load balancer, and zerodrop only reads it for the gates.
func (c *Controller) managed(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || model.GateOnly(svc.Annotations) {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return c.opts.AdoptClassless
	}
	return *svc.Spec.LoadBalancerClass == c.opts.LoadBalancerClass
}

// enqueueAll enqueues every load balancer a Service or the provider has,
// and returns their keys.
func (c *Controller) enqueueAll(ctx context.Context) []string {
	var list corev1.ServiceList
	if err := c.cache.List(ctx, &list); err != nil {
		c.opts.Logger.Error(err, "list services")
		return nil
	}
	var keys []string
	for i := range list.Items {
		if svc := &list.Items[i]; c.managed(svc) || hasFinalizer(svc) {
			key := c.opts.KeyFunc(svc)
			c.queue.Add(key)
			keys = append(keys, key)
		}
	}
	return append(keys, c.enqueueOrphans(ctx)...)
}

// Synced reports whether every load balancer of Start's first pass has been
// reconciled once without error (or refused by the provider, ErrRefused): a
// data-plane replica then serves what the Services ask (its readiness, so
// that a DaemonSet update waits for it).
// False before Start and while the caches sync.
func (c *Controller) Synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first != nil && len(c.first) == 0
}

// refusedRetryDelay is the least wait before a load balancer the provider
// refused (provider.ErrRefused) is tried again without a change.
const refusedRetryDelay = 10 * time.Second

// retryLimiter is client-go's controller rate limiter with the per-item
// backoff capped at maxRetryDelay.
func retryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// countBackends records the backends of key's load balancer by state, as
// the reconcile left it (lb nil: deleted), and moves zerodrop_backends by
// the difference from what it had: a reconcile costs its own load balancer,
// not a pass over every one.
func (c *Controller) countBackends(key string, lb *model.LoadBalancer) {
	if c.opts.Metrics == nil || c.opts.Metrics.Backends == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.backends == nil {
		c.backends = map[string]map[model.BackendState]int{}
		c.totals = map[model.BackendState]int{model.Active: 0, model.Draining: 0}
	}
	for state, n := range c.backends[key] {
		c.totals[state] -= n
	}
	delete(c.backends, key)
	if lb != nil {
		counts := map[model.BackendState]int{}
		for _, l := range lb.Listeners {
			for _, b := range l.Backends {
				counts[b.State]++
			}
		}
		c.backends[key] = counts
		for state, n := range counts {
			c.totals[state] += n
		}
	}
	for state, n := range c.totals {
		c.opts.Metrics.Backends.WithLabelValues(string(state)).Set(float64(n))
	}
}
