package haproxy

import (
	"context"
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
	b.mu.Unlock()

	call.snap, call.err = p.snapshot(ctx)
	b.mu.Lock()
	b.inflight = nil
	if call.err == nil && b.writes.Load() == gen {
		b.snap, b.at, b.gen = call.snap, time.Now(), gen
	}
	b.mu.Unlock()
	close(call.done)
	return call.snap, call.err
}

// offer records a snapshot read afresh (Apply's version check): after a
// conflict the caller re-reads, and must see at least what Apply saw.
func (b *readBatch) offer(s *snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.snap, b.at, b.gen = s, time.Now(), b.writes.Load()
}
