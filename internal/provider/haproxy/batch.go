package haproxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReadBatchWindow is how long one runtime snapshot serves Observe and
// Backends calls: a controller verifying a thousand load balancers after a
// restart reads HAProxy's state a few times, not three thousand times.
const DefaultReadBatchWindow = 250 * time.Millisecond

// readBatch shares one snapshot among the reads made within a short window,
// and among concurrent reads (single flight). Any write through this Provider
// ends the window, so a reconcile never plans on a state older than its own
// last write; Apply's version check always reads afresh.
type readBatch struct {
	window time.Duration
	writes atomic.Uint64 // bumped by every write

	mu       sync.Mutex
	snap     *snapshot
	at       time.Time
	gen      uint64
	inflight *batchCall
}

type batchCall struct {
	done chan struct{}
	snap *snapshot
	err  error
}

// shared returns a snapshot no older than the window and no older than this
// Provider's last write.
func (p *Provider) shared(ctx context.Context) (*snapshot, error) {
	b := &p.batch
	if b.window <= 0 {
		return p.snapshot(ctx)
	}
	b.mu.Lock()
	gen := b.writes.Load()
	if b.snap != nil && b.gen == gen && time.Since(b.at) < b.window {
		s := b.snap
		b.mu.Unlock()
		return s, nil
	}
	if call := b.inflight; call != nil {
		b.mu.Unlock()
		select {
		case <-call.done:
			return call.snap, call.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	call := &batchCall{done: make(chan struct{})}
	b.inflight = call
	// Stale: let it go now rather than once the new one is read, so that
	// two whole snapshots are not held at once.
	b.snap = nil
	b.mu.Unlock()

	// The read is shared: it runs on a context of its own (the caller's
	// values, not its cancellation), so a caller that goes away — a state
	// endpoint client that disconnects — fails only its own wait, never the
	// others' read (the replica's reconcile among them).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedReadTimeout)
	go func() {
		defer cancel()
		call.snap, call.err = p.snapshot(rctx)
		b.mu.Lock()
		b.inflight = nil
		if call.err == nil && b.writes.Load() == gen {
			b.snap, b.at, b.gen = call.snap, time.Now(), gen
		}
		b.mu.Unlock()
		close(call.done)
	}()
	select {
	case <-call.done:
		return call.snap, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sharedReadTimeout bounds a shared snapshot read, which no caller's
// context ends: a runtime socket that stops answering fails the read after
// this long, and the next caller starts a new one.
const sharedReadTimeout = 30 * time.Second

// offer records a snapshot read afresh (Apply's version check): after a
// conflict the caller re-reads, and must see at least what Apply saw.
func (b *readBatch) offer(s *snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.snap, b.at, b.gen = s, time.Now(), b.writes.Load()
}

// oldConns shares the old workers' connection counts among the Backends
// calls made at once or within the read window. Each reading is a `show
// proc` on the master socket and a `show stat` per old worker: one per call,
// with dozens of workers draining at once, overflowed the master socket's
// accept queue (connect failing with EAGAIN) and failed reconciles. Old
// workers take no new connections, so their counts only fall until the next
// reload, which makes a new old worker: a reload discards the reading.
type oldConns struct {
	reloads atomic.Uint64 // bumped by every reload

	mu     sync.Mutex // held while reading: concurrent callers wait for it
	counts map[string]int64
	at     time.Time
	gen    uint64
}

// sharedOldConns returns, per "proxy/server", the connections old workers
// still hold, no older than the read window and no older than the last
// reload.
func (p *Provider) sharedOldConns(ctx context.Context) (map[string]int64, error) {
	c := &p.old
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.reloads.Load()
	if c.counts != nil && c.gen == gen && time.Since(c.at) < p.batch.window {
		return c.counts, nil
	}
	counts, err := p.oldWorkerConnections(ctx)
	if err != nil {
		return nil, err
	}
	if p.batch.window > 0 {
		c.counts, c.at, c.gen = counts, time.Now(), gen
	}
	return counts, nil
}

// oldWorkerConnections sums, per "proxy/server", the current connections
// that old workers (the ones a reload left finishing their connections)
// still hold for zerodrop's servers. The master CLI reaches them by PID.
func (p *Provider) oldWorkerConnections(ctx context.Context) (map[string]int64, error) {
	info, err := p.procs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, pid := range info.OldWorkers {
		p.hooks.OnRead("show-stat")
		// Servers only (the type mask 4): the only rows counted here.
		text, err := p.master.do(ctx, fmt.Sprintf("@!%d show stat -1 4 -1", pid))
		if err != nil {
			return nil, fmt.Errorf("old worker %d: %w", pid, err)
		}
		rows, err := parseStat(text)
		if err != nil {
			// The worker may have exited between show proc and show stat.
			p.log.V(1).Info("old worker stats unreadable", "pid", pid, "err", err)
			continue
		}
		for _, r := range rows {
			if _, _, ok := parseProxyName(r.Proxy); ok && r.Type == statServer {
				out[r.Proxy+"/"+r.Name] += r.Scur
			}
		}
	}
	return out, nil
}
