package haproxy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// errRejected marks a configuration HAProxy refused (render, `haproxy -c`,
// or the new worker failing to start, e.g. a port already taken) while the
// previous one keeps serving. In a group reload it means one member's input
// may be bad: the members are then told apart (reloadRefused), so that the
// bad one fails alone.
var errRejected = fmt.Errorf("configuration rejected: %w", provider.ErrRefused)

// reloadGroup is group commit for reloads and mirrors. A reload costs the
// same whether it changes one listener or a hundred (`haproxy -c`, a new
// worker, the server-state round trip), and so does a mirror (the whole
// configuration and server state rendered and fsync'd), so Apply and Delete
// calls that need one while another is running join one pending batch
// instead of queueing one each: building thousands of load balancers from
// nothing then takes tens of reloads, not thousands, and endpoint churn on
// many load balancers one mirror per batch. How many calls can join is
// bounded by how many run at once: the controller's workers.
//
// A leader waits, before it takes Provider.mu, for the calls that were
// already preparing (checking versions, writing backends under Provider.mu)
// when it started to lead: without that, the leader usually wins the lock
// again right after its own preparation and reloads alone, while the others
// queue for their preparation behind it. Calls that start later do not hold
// it up, so a steady stream of calls cannot starve a reload.
type reloadGroup struct {
	mu      sync.Mutex
	cond    sync.Cond    // signalled (with mu) when a call stops preparing
	pending *reloadBatch // open for joining until its leader holds Provider.mu

	seq       uint64              // tickets handed out
	preparing map[uint64]struct{} // tickets of the calls still preparing
}

// enter registers a write call that may need a reload; leave, when it joins
// a batch or returns, ends its preparation. leave is idempotent.
func (g *reloadGroup) enter() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.preparing == nil {
		g.preparing = map[uint64]struct{}{}
		g.cond.L = &g.mu
	}
	g.seq++
	g.preparing[g.seq] = struct{}{}
	return g.seq
}

func (g *reloadGroup) leave(ticket uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaveLocked(ticket)
}

func (g *reloadGroup) leaveLocked(ticket uint64) {
	if _, ok := g.preparing[ticket]; ok {
		delete(g.preparing, ticket)
		g.cond.Broadcast()
	}
}

// awaitPreparedLocked waits until no call that entered up to ticket upTo is
// still preparing. g.mu is held.
func (g *reloadGroup) awaitPreparedLocked(upTo uint64) {
	for {
		waiting := false
		for t := range g.preparing {
			if t <= upTo {
				waiting = true
				break
			}
		}
		if !waiting {
			return
		}
		g.cond.Wait()
	}
}

// reloadBatch is one pending reload and the keys that joined it.
type reloadBatch struct {
	members map[string]*reloadMember
	done    chan struct{} // closed when every member's err is set
}

// reloadMember is one caller's part of a batch: key's target (nil: delete)
// and the outcome for that key alone. A member with reload false made only
// runtime changes and needs them mirrored into the configuration: that too
// is an fsync'd write of the whole configuration, shared the same way, and a
// reload in the batch carries it.
type reloadMember struct {
	key    string
	target *model.LoadBalancer
	reload bool
	err    error
}

// reloadJoined makes HAProxy serve target for key (nil: nothing) through a
// group reload, and returns key's own outcome. The caller must not hold
// p.mu; ticket is its enter's. The first caller to find no open batch leads
// it: it waits for the calls preparing and for p.mu (the previous reload),
// closes the batch, reloads once for every member and
// verifies each. A key already in the open batch (a second Provider call
// for it) waits for the next one, since one configuration holds one target
// per key.
func (p *Provider) reloadJoined(ctx context.Context, ticket uint64, key string, target *model.LoadBalancer) error {
	return p.join(ctx, ticket, &reloadMember{key: key, target: target, reload: true})
}

// mirrorJoined mirrors the runtime changes just made for key (making it
// target) into the configuration, in the next batch (see reloadMember), and
// checks that the reading mirrored still has them (lostChanges). The caller must not
// hold p.mu.
func (p *Provider) mirrorJoined(ctx context.Context, ticket uint64, key string, target *model.LoadBalancer) error {
	return p.join(ctx, ticket, &reloadMember{key: key, target: target})
}

// join adds m to the open batch (or opens and leads one) and returns m's
// outcome.
func (p *Provider) join(ctx context.Context, ticket uint64, m *reloadMember) error {
	key := m.key
	g := &p.group
	for {
		g.mu.Lock()
		// Done preparing, before any wait: a leader may be waiting for it.
		g.leaveLocked(ticket)
		b := g.pending
		if b != nil && b.members[key] != nil {
			g.mu.Unlock()
			select {
			case <-b.done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		lead := b == nil
		if lead {
			b = &reloadBatch{members: map[string]*reloadMember{}, done: make(chan struct{})}
			g.pending = b
		}
		b.members[key] = m
		g.mu.Unlock()
		if lead {
			p.lead(ctx, b)
			return m.err
		}
		select {
		case <-b.done:
			return m.err
		case <-ctx.Done():
			// The leader goes on: the outcome is unknown to this caller,
			// as with any write that times out.
			return ctx.Err()
		}
	}
}

// lead runs batch b under p.mu. It works on the leader's context without its
// cancellation: the other members wait for this reload and must not fail
// because the leader's caller gave up; reload and validate bound their own
// waits.
func (p *Provider) lead(ctx context.Context, b *reloadBatch) {
	ctx = context.WithoutCancel(ctx)
	g := &p.group
	g.mu.Lock()
	g.awaitPreparedLocked(g.seq)
	g.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(b.done)
	g.mu.Lock()
	if g.pending == b {
		g.pending = nil
	}
	members := make([]*reloadMember, 0, len(b.members))
	for _, m := range b.members {
		members = append(members, m)
	}
	g.mu.Unlock()
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	var reloads, mirrors []*reloadMember
	for _, m := range members {
		if m.reload {
			reloads = append(reloads, m)
		} else {
			mirrors = append(mirrors, m)
		}
	}

	// A successful reload writes the configuration rendered from the
	// runtime, mirror-only members' changes included, and reads the runtime
	// after it (to check them against).
	var after *snapshot
	// A member HAProxy refused last time reloads alone, after the others:
	// while it is still bad it must not make their reload fail again (at
	// thousands of members, each refusal costs reloads to tell it apart).
	// The probe's reading of the runtime is the first reload's too: at
	// thousands of load balancers each reading is a whole `show stat`.
	held, before := p.refuseHeld(ctx, reloads)
	together, alone := splitRefused(held, p.refused)
	if len(together) > 0 {
		var err error
		after, err = p.reloadAll(ctx, together, before)
		switch {
		case err != nil && len(together) > 1 && errors.Is(err, errRejected):
			p.log.Info("group reload rejected, reloading its members apart", "members", len(together), "err", err.Error())
			p.reloadRefused(ctx, together, err)
		case err != nil:
			for _, m := range together {
				m.err = err
			}
		}
	}
	for _, m := range alone {
		snap, err := p.reloadAll(ctx, []*reloadMember{m}, nil)
		if err != nil {
			m.err = err
		} else {
			after = snap // the latest reading
		}
	}
	if p.refused == nil {
		p.refused = map[string]bool{}
	}
	for _, m := range reloads {
		switch {
		case m.err == nil:
			delete(p.refused, m.key)
		case errors.Is(m.err, errRejected):
			p.refused[m.key] = true
		}
	}
	if len(mirrors) > 0 && after == nil {
		var err error
		if after, err = p.mirrorRead(ctx); err != nil {
			for _, m := range mirrors {
				m.err = fmt.Errorf("runtime changes made, configuration not mirrored (retried on the next Observe): %w", err)
			}
		}
	}
	if after != nil {
		for _, m := range mirrors {
			m.err = lostChanges(after, m.key, m.target)
		}
	}
	for _, m := range members {
		if m.err != nil {
			// The configuration file may lag the runtime: stay dirty, so
			// that the next Observe retries the mirror.
			return
		}
	}
	p.markClean()
}

// splitRefused parts members into those to reload together and those
// refused last time (refused), each to reload alone.
func splitRefused(members []*reloadMember, refused map[string]bool) (together, alone []*reloadMember) {
	for _, m := range members {
		if refused[m.key] {
			alone = append(alone, m)
		} else {
			together = append(together, m)
		}
	}
	return together, alone
}

// reloadRefused serves what it can of members, which HAProxy refused
// together with refusal, so that only a bad member fails: the members
// whose proxies the refusal names (a listener that cannot bind names its
// proxy) fail with it and the others are reloaded together; when it names
// none, they are reloaded in halves, and a refused half is split again.
// One bad listener among n members costs one more reload when HAProxy
// names it and about 2·log2(n) when it does not, where reloading each
// member alone cost n — at thousands of members, each reload validating
// the whole configuration, hours.
func (p *Provider) reloadRefused(ctx context.Context, members []*reloadMember, refusal error) {
	rest := failNamed(members, refusal)
	parts := [][]*reloadMember{rest}
	if len(rest) == len(members) {
		parts = [][]*reloadMember{members[:len(members)/2], members[len(members)/2:]}
	}
	// No part is empty: failNamed leaves at least one member, and a
	// refusal is split only with two or more.
	for _, part := range parts {
		_, err := p.reloadAll(ctx, part, nil)
		switch {
		case err == nil:
		case len(part) > 1 && errors.Is(err, errRejected):
			p.reloadRefused(ctx, part, err)
		default:
			for _, m := range part {
				m.err = err
			}
		}
	}
}

// failNamed gives refusal to the members whose proxies its alerts say
// cannot bind, and returns the others; members as they are when it names
// none of them or all of them (then it tells nothing apart). Only bind
// failures count: the alerts beside them include a running HAProxy's
// ("proxy '…' has no server available!"), which name proxies that did
// nothing wrong.
func failNamed(members []*reloadMember, refusal error) []*reloadMember {
	var binds []string
	for _, alert := range strings.Split(refusal.Error(), "; ") {
		if strings.Contains(alert, "cannot bind") {
			binds = append(binds, alert)
		}
	}
	text := strings.Join(binds, "\n")
	var named, rest []*reloadMember
	for _, m := range members {
		if strings.Contains(text, proxyPrefix+encodeName(m.key)+":") {
			named = append(named, m)
		} else {
			rest = append(rest, m)
		}
	}
	if len(named) == 0 || len(rest) == 0 {
		return members
	}
	for _, m := range named {
		m.err = refusal
	}
	return rest
}

// reloadAll renders the configuration with every member's target and every
// other load balancer as observed, reloads once, and then verifies each
// member's key (setting member errors). The error returned is the reload's
// own, before any member was verified; on success it returns the reading
// taken after the reload, which is true for every key but the members' (their
// backend states may have been set since). before, when not nil, is a
// reading of the runtime taken since the last reload, with nothing written
// in between; nil reads it.
func (p *Provider) reloadAll(ctx context.Context, members []*reloadMember, before *snapshot) (*snapshot, error) {
	snap := before
	if snap == nil {
		var err error
		if snap, err = p.snapshot(ctx); err != nil {
			return nil, err
		}
	}
	lbs := snap.unversioned()
	for _, m := range members {
		delete(lbs, m.key)
		if m.target != nil && len(m.target.Listeners) > 0 {
			lbs[m.key] = m.target
		}
	}
	cfg, meta, err := p.render(lbs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRejected, err)
	}
	if err := p.reload(ctx, cfg, meta); err != nil {
		return nil, err
	}
	after, err := p.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("after reload: %w", err)
	}
	fixed := false
	for _, m := range members {
		ran, err := p.verifyReload(ctx, after, m.key, m.target)
		fixed = fixed || ran
		if err != nil {
			m.err = err
		}
	}
	if fixed {
		if err := p.mirror(ctx); err != nil {
			for _, m := range members {
				if m.err == nil {
					m.err = fmt.Errorf("after reload: backend states set, configuration not mirrored: %w", err)
				}
			}
		}
	}
	return after, nil
}

// verifyReload checks, after a reload, that HAProxy serves key's frontends
// as rendered, and sets at run time the backend states the configuration
// could not carry (none are expected: the server-state file carries drain
// and maintenance). It reports whether it wrote; the caller mirrors then.
func (p *Provider) verifyReload(ctx context.Context, after *snapshot, key string, target *model.LoadBalancer) (bool, error) {
	if target != nil && len(target.Listeners) == 0 {
		target = nil
	}
	fix := model.Diff(after.loadBalancer(key), target)
	var backendOps []model.Op
	for _, op := range fix.Ops {
		if op.Backend == nil || fix.Create {
			return false, fmt.Errorf("after reload HAProxy does not serve what was rendered: %s", fix)
		}
		backendOps = append(backendOps, op)
	}
	if len(backendOps) == 0 {
		return false, nil
	}
	p.log.Info("setting backend states after reload", "key", key, "ops", fix.String())
	if err := p.runBackendOps(ctx, after, key, target, backendOps); err != nil {
		return true, fmt.Errorf("after reload: %w", err)
	}
	return true, nil
}
