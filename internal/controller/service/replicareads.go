package service

import (
	"context"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
)

// defaultReplicaReadTimeout bounds a read of a data-plane replica (as its
// state endpoint's client does).
const defaultReplicaReadTimeout = 5 * time.Second

// replicaReads reads the data-plane replicas for the control role's
// reconciles: every replica at the same time, each read bounded, so that a
// replica that does not answer costs a reconcile one bound, not one per
// replica. And it remembers the replicas whose last read failed: a
// reconcile does not wait for those at all — they count as not answering
// (Ready stays False, a deleted Service's finalizer stays: the direction
// that waits) — while one read of each at a time, in the background, finds
// when it answers again. Without that, every Service's reconcile would wait
// out the bound of the same replica, and the workers with it: the Services
// behind them in the queue (a new one's address too) would wait as well.
type replicaReads struct {
	timeout time.Duration
	// answered, when set, is called when a probe finds a replica that
	// did not answer answering again: the load balancers waiting for it
	// are looked at then (replicaWaits), not at their back-off's time.
	answered func()

	mu   sync.Mutex
	down map[string]*downReplica // by replica name
}

// downReplica is a replica whose last read failed: err, and whether a read
// of it (the probe) is in flight.
type downReplica struct {
	err     error
	probing bool
}

func newReplicaReads(timeout time.Duration, answered func()) *replicaReads {
	if timeout <= 0 {
		timeout = defaultReplicaReadTimeout
	}
	return &replicaReads{timeout: timeout, answered: answered, down: map[string]*downReplica{}}
}

// observe reads key on every replica in rs at once: the load balancers of
// those that answered, the errors of the others. It waits for no replica
// whose last read failed; it starts a probe of it instead, if none runs.
func (r *replicaReads) observe(ctx context.Context, rs []lbtarget.Replica, key string) (map[string]*model.LoadBalancer, map[string]error) {
	lbs, errs := make([]*model.LoadBalancer, len(rs)), make([]error, len(rs))
	names := map[string]bool{}
	var wg sync.WaitGroup
	for i, rep := range rs {
		names[rep.Name] = true
		if down, err := r.skip(ctx, rep, key); down {
			errs[i] = err
			continue
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, r.timeout)
			defer cancel()
			lbs[i], errs[i] = rep.Provider.Observe(rctx, key)
			if ctx.Err() == nil {
				r.record(rep.Name, errs[i])
			}
		})
	}
	wg.Wait()
	r.forget(names)
	out, unread := map[string]*model.LoadBalancer{}, map[string]error{}
	for i, rep := range rs {
		if errs[i] != nil {
			unread[rep.Name] = errs[i]
			continue
		}
		out[rep.Name] = lbs[i]
	}
	return out, unread
}

// skip reports whether rep's last read failed (and with what); if so, and
// no probe of it runs, it starts one: a read of key on ctx, bounded as any
// other, whose success makes the replica read again by the reconciles.
func (r *replicaReads) skip(ctx context.Context, rep lbtarget.Replica, key string) (bool, error) {
	r.mu.Lock()
	d := r.down[rep.Name]
	if d == nil {
		r.mu.Unlock()
		return false, nil
	}
	err, start := d.err, !d.probing
	d.probing = true
	r.mu.Unlock()
	if start {
		go func() {
			pctx, cancel := context.WithTimeout(ctx, r.timeout)
			defer cancel()
			_, perr := rep.Provider.Observe(pctx, key)
			if r.probed(rep.Name, d, ctx.Err(), perr) && r.answered != nil {
				r.answered()
			}
		}()
	}
	return true, err
}

// probed records the outcome perr of the probe of d, the replica name,
// made on a context that ended with cerr (nil: not ended), and reports
// whether it found the replica answering again.
func (r *replicaReads) probed(name string, d *downReplica, cerr, perr error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down[name] != d {
		return false // read since, or gone: that is newer
	}
	switch {
	case cerr != nil:
		d.probing = false
	case perr == nil:
		delete(r.down, name)
		return true
	default:
		d.err, d.probing = perr, false
	}
	return false
}

// failed is the last error of each replica of rs whose last read failed:
// those a look counts as not answering (observe), found without starting
// a probe.
func (r *replicaReads) failed(rs []lbtarget.Replica) map[string]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]error{}
	for _, rep := range rs {
		if d := r.down[rep.Name]; d != nil {
			out[rep.Name] = d.err
		}
	}
	return out
}

// record keeps the outcome of a reconcile's read of a replica.
func (r *replicaReads) record(name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.down, name)
		return
	}
	if d := r.down[name]; d != nil {
		d.err = err
		return
	}
	r.down[name] = &downReplica{err: err}
}

// forget drops the replicas that no longer count.
func (r *replicaReads) forget(names map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.down {
		if !names[name] {
			delete(r.down, name)
		}
	}
}
