package haproxy

import "context"

// checkSnapshot is a runtime snapshot that Apply and Delete calls share for
// their version checks, under p.mu. Reading and parsing the whole runtime
// state costs time in proportion to every load balancer HAProxy serves (a
// second at 5,000 with 50,000 servers), and the checks run one after
// another under the write lock: one read per call made the calls of a
// group commit wait in line for their reads instead of for the reload.
//
// A check needs what HAProxy runs for its own key, read after the call
// began. The shared snapshot is therefore used by a call that entered
// (reloadGroup.enter) before the read started, for a key no write of this
// Provider touched since; a reload or a restart discards it. Writes by
// someone else are not seen, as with a read of one's own (see Apply).
type checkSnapshot struct {
	snap    *snapshot
	after   uint64          // the last ticket handed out when the read began
	written map[string]bool // keys written at run time since the read
}

// checked returns a snapshot valid for the version check of key by the
// call holding ticket, and whether it was read just now. A shared one may
// miss writes to other keys, so only a fresh one may serve the read batch
// (readBatch.offer). p.mu is held.
func (p *Provider) checked(ctx context.Context, ticket uint64, key string) (*snapshot, bool, error) {
	c := &p.check
	if c.snap != nil && c.after >= ticket && !c.written[key] {
		return c.snap, false, nil
	}
	snap, err := p.readChecked(ctx)
	return snap, err == nil, err
}

// readChecked reads the runtime afresh and makes it the shared snapshot.
// p.mu is held.
func (p *Provider) readChecked(ctx context.Context) (*snapshot, error) {
	c := &p.check
	p.group.mu.Lock()
	after := p.group.seq
	p.group.mu.Unlock()
	snap, err := p.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	*c = checkSnapshot{snap: snap, after: after, written: map[string]bool{}}
	return snap, nil
}

// wroteKey records a runtime write for key: the shared snapshot no longer
// shows it. p.mu is held.
func (p *Provider) wroteKey(key string) {
	if p.check.written != nil {
		p.check.written[key] = true
	}
}

// forgetChecked discards the shared snapshot (a reload, a restart of
// HAProxy: every key may have changed). p.mu is held.
func (p *Provider) forgetChecked() { p.check = checkSnapshot{} }
