package haproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// delServerRetry bounds how long `del server` is retried while the server
// still has sessions after `shutdown sessions server`.
const delServerRetry = 3 * time.Second

// Apply executes plan: backend ops as runtime commands, then, when the plan
// creates, changes or deletes a listener, one validated, hitless reload.
//
// Optimistic concurrency is best effort: HAProxy has no ETag, so Apply
// re-reads the runtime API (or shares a read that began after this call did
// and that no write to key has outdated since: checkSnapshot) and compares
// the hash of key's state with plan.Version before its first write, and returns an error wrapping
// provider.ErrConflict (having written nothing) when they differ. A change
// made by someone else between that read and the writes is not detected.
// Writes of this Provider are serialised, whatever the key, except that a
// reload is shared with the calls that wait for one at the same time
// (reloadJoined): between this call's check and its reload, another call's
// reload may run, and renders key as observed then.
//
// An empty plan sends no command at all.
func (p *Provider) Apply(ctx context.Context, plan model.Plan) error {
	if plan.Empty() {
		return nil
	}
	if plan.Key == "" {
		return errors.New("haproxy: apply: plan has no key")
	}
	ticket := p.group.enter()
	defer p.group.leave(ticket)
	p.mu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			p.mu.Unlock()
		}
	}()
	snap, fresh, err := p.checked(ctx, ticket, plan.Key)
	if err == nil && !fresh && version(snap.loadBalancer(plan.Key)) != plan.Version {
		// A conflict is told from a read of one's own: the caller re-plans
		// on what it then observes, which must show at least what was seen.
		fresh = true
		snap, err = p.readChecked(ctx)
	}
	if err != nil {
		return fmt.Errorf("haproxy: apply %s: %w", plan.Key, err)
	}
	if fresh {
		p.batch.offer(snap)
	}
	cur := snap.loadBalancer(plan.Key)
	if got := version(cur); got != plan.Version {
		return fmt.Errorf("haproxy: apply %s: observed version %q, plan made against %q: %w", plan.Key, got, plan.Version, provider.ErrConflict)
	}
	target, err := model.Apply(cur, plan)
	if err != nil {
		return fmt.Errorf("haproxy: apply %s: %w", plan.Key, err)
	}
	for _, l := range target.Listeners {
		if err := validateListener(l); err != nil {
			return fmt.Errorf("haproxy: apply %s: listener %s: %w", plan.Key, l.Name, err)
		}
	}
	frontend := false
	var backendOps []model.Op
	for _, op := range plan.Ops {
		if op.Backend == nil {
			frontend = true
		} else {
			backendOps = append(backendOps, op)
		}
	}
	log := p.log.WithValues("key", plan.Key)
	p.markDirty()
	if err := p.runBackendOps(ctx, snap, plan.Key, target, backendOps); err != nil {
		// Whatever did happen must reach the configuration file.
		if merr := p.mirror(ctx); merr != nil {
			log.Error(merr, "mirroring runtime changes into the configuration")
		}
		return fmt.Errorf("haproxy: apply %s: %w", plan.Key, err)
	}
	if frontend {
		// The reload joins the other calls waiting for one (group commit);
		// the runtime changes just made are in the snapshot it renders from.
		p.mu.Unlock()
		unlocked = true
		if err := p.reloadJoined(ctx, ticket, plan.Key, target); err != nil {
			return fmt.Errorf("haproxy: apply %s: %w", plan.Key, err)
		}
		log.V(1).Info("applied with reload", "plan", plan.String())
		return nil
	}
	// The mirror, too, is shared with the calls writing at the same time;
	// it checks that the runtime it mirrored still has key as target.
	p.mu.Unlock()
	unlocked = true
	if err := p.mirrorJoined(ctx, ticket, plan.Key, target); err != nil {
		return fmt.Errorf("haproxy: apply %s: %w", plan.Key, err)
	}
	log.V(1).Info("applied at run time", "plan", plan.String())
	return nil
}

// Delete removes key's listeners with one reload, which it shares with the
// other calls waiting for one; the other load balancers are untouched and
// established connections finish on the old worker. It returns nil when
// HAProxy serves nothing for key.
func (p *Provider) Delete(ctx context.Context, key string) error {
	ticket := p.group.enter()
	defer p.group.leave(ticket)
	p.mu.Lock()
	snap, _, err := p.checked(ctx, ticket, key)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("haproxy: delete %s: %w", key, err)
	}
	if len(snap.proxiesOf(key)) == 0 {
		// A key refused before and never served is gone without a
		// reload; it is no longer one to reload alone (group.go, lead).
		delete(p.refused, key)
		p.mu.Unlock()
		return nil
	}
	p.markDirty()
	p.mu.Unlock()
	if err := p.reloadJoined(ctx, ticket, key, nil); err != nil {
		return fmt.Errorf("haproxy: delete %s: %w", key, err)
	}
	return nil
}

// runBackendOps executes backend ops at run time on proxies that exist:
// additions first, then updates, then removals, so that a pool's capacity
// does not dip within one plan.
func (p *Provider) runBackendOps(ctx context.Context, snap *snapshot, key string, target *model.LoadBalancer, ops []model.Op) error {
	if len(ops) > 0 {
		p.wroteKey(key)
	}
	rank := map[model.OpKind]int{model.OpAddBackend: 0, model.OpUpdateBackend: 1, model.OpRemoveBackend: 2}
	ops = append([]model.Op(nil), ops...)
	sort.SliceStable(ops, func(i, j int) bool { return rank[ops[i].Kind] < rank[ops[j].Kind] })
	for _, op := range ops {
		pv := snap.proxy(key, op.Listener)
		l := target.Listener(op.Listener)
		if pv == nil || l == nil {
			return fmt.Errorf("%s: no proxy %s: %w", op, proxyName(key, op.Listener), provider.ErrConflict)
		}
		var err error
		switch op.Kind {
		case model.OpAddBackend:
			err = p.addServer(ctx, pv.Name, l.Probe, *op.Backend)
		case model.OpUpdateBackend:
			err = p.updateServer(ctx, pv, *op.Backend)
		case model.OpRemoveBackend:
			err = p.removeServer(ctx, pv, *op.Backend)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}

// addServer adds a server at run time. HAProxy 2.6 creates it in
// maintenance with its health check disabled (default-server is not
// inherited, so the check settings are spelled out): enable the check, then
// set the state.
//
// A server that leaves maintenance is UP until checks say otherwise (2.6 has
// no `init-state`), so a backend whose check fails would get traffic for
// `fall` intervals. The state is therefore set together with `health down`,
// in one command line the CLI runs in one go: the server then needs `rise`
// passing checks before its first connection (one check interval × rise
// later than it would otherwise serve).
func (p *Provider) addServer(ctx context.Context, proxy string, probe model.Probe, b model.Backend) error {
	b = renderedBackend(canonicalBackend(b))
	srv := proxy + "/" + serverName(b.Address, b.Port)
	cmd := fmt.Sprintf("add server %s %s weight %d %s", srv, hostPort(b.Address, b.Port), b.Weight, checkArgs(probe))
	if err := p.command(ctx, "add-server", cmd, replyServerAdded); err != nil {
		return err
	}
	if err := p.command(ctx, "enable-health", "enable health "+srv, ""); err != nil {
		return err
	}
	state := "ready"
	if b.State == model.Draining {
		state = "drain"
	}
	cmds := []string{fmt.Sprintf("set server %s state %s", srv, state), fmt.Sprintf("set server %s health down", srv)}
	reply, err := p.writeChain(ctx, []string{"set-server", "set-server"}, cmds)
	if err != nil {
		return err
	}
	return expectEmpty(strings.Join(cmds, "; "), reply)
}

// updateServer sets weight and state, each only when it differs from what
// HAProxy has. A server enabled again takes no traffic before a passing
// check.
func (p *Provider) updateServer(ctx context.Context, pv *proxyView, b model.Backend) error {
	b = canonicalBackend(b)
	sv := pv.server(b)
	if sv == nil {
		return fmt.Errorf("server %s vanished: %w", b.ID(), provider.ErrConflict)
	}
	srv := pv.Name + "/" + sv.Name
	maint := sv.AdminState&adminMaintMask != 0
	drain := sv.AdminState&adminDrainMask != 0
	switch b.State {
	case model.Draining:
		if maint || !drain {
			return p.command(ctx, "set-server", "set server "+srv+" state drain", "")
		}
	default:
		if sv.UWeight != b.Weight {
			if err := p.command(ctx, "set-server", fmt.Sprintf("set server %s weight %d", srv, b.Weight), ""); err != nil {
				return err
			}
		}
		if maint || drain {
			// Enabled again (node mode, externalTrafficPolicy Local: a pod
			// starts on a node whose last one left), or an addServer cut
			// short (its writer killed) finished. Its last check result
			// may be a stale UP from before; like a new server, it waits
			// for `rise` passing checks (see addServer) — which need its
			// check enabled: an addServer cut short before `enable health`
			// leaves it off, and `health down` would then hold the server
			// down for good.
			if sv.CheckState&checkEnabled == 0 {
				if err := p.command(ctx, "enable-health", "enable health "+srv, ""); err != nil {
					return err
				}
			}
			cmds := []string{"set server " + srv + " state ready", "set server " + srv + " health down"}
			reply, err := p.writeChain(ctx, []string{"set-server", "set-server"}, cmds)
			if err != nil {
				return err
			}
			return expectEmpty(strings.Join(cmds, "; "), reply)
		}
	}
	return nil
}

// removeServer removes a server at once: maintenance, shutdown of the
// sessions left (draining them is the controller's job, before it plans the
// removal), delete; `del server` is retried while sessions remain.
func (p *Provider) removeServer(ctx context.Context, pv *proxyView, b model.Backend) error {
	sv := pv.server(b)
	if sv == nil {
		return nil
	}
	srv := pv.Name + "/" + sv.Name
	if sv.AdminState&adminMaintMask == 0 {
		if err := p.command(ctx, "set-server", "set server "+srv+" state maint", ""); err != nil {
			return err
		}
	}
	if err := p.command(ctx, "shutdown-sessions", "shutdown sessions server "+srv, ""); err != nil {
		return err
	}
	deadline := time.Now().Add(delServerRetry)
	for {
		err := p.command(ctx, "del-server", "del server "+srv, replyServerDeleted)
		if err == nil || isReply(err, replyNoSuchServer) {
			return nil
		}
		var ce *CommandError
		if !errors.As(err, &ce) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// command sends a mutating command and checks its reply: want, or nothing
// when want is "".
func (p *Provider) command(ctx context.Context, op, cmd, want string) error {
	reply, err := p.write(ctx, op, cmd)
	if err != nil {
		return err
	}
	if want == "" {
		return expectEmpty(cmd, reply)
	}
	return expectReply(cmd, reply, want)
}

// mirror writes what HAProxy runs into the configuration file and the
// server-state file, without reloading, so that a later reload or a cold
// start keeps the runtime changes.
func (p *Provider) mirror(ctx context.Context) error {
	_, err := p.mirrorRead(ctx)
	return err
}

// markDirty records, before a write, that the configuration file may lag
// what HAProxy runs: a failed mirror is otherwise never retried, because the
// next plan is empty (the runtime already matches) and a restart of HAProxy
// from the file would lose the change.
func (p *Provider) markDirty() {
	p.dirty.Store(true)
	f, err := os.OpenFile(p.paths.pending, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		p.log.Error(err, "recording a pending mirror; retried by this process only")
		return
	}
	_ = f.Close()
}

// markClean records that the configuration file holds what HAProxy runs.
func (p *Provider) markClean() {
	if err := os.Remove(p.paths.pending); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Error(err, "clearing the pending-mirror mark")
		return
	}
	p.dirty.Store(false)
}

// mirrorPending reports whether a write of this or another Provider left
// the configuration file behind the runtime.
func (p *Provider) mirrorPending() bool {
	if p.dirty.Load() {
		return true
	}
	_, err := os.Lstat(p.paths.pending)
	return err == nil
}

// retryMirror mirrors the runtime into the configuration when a write left
// it behind. A writer holding the lock mirrors anyway when it is done, so
// this never waits for one. Failures are logged, not returned: reads and
// backend changes must go on while the disk is broken.
func (p *Provider) retryMirror(ctx context.Context) {
	if !p.mirrorPending() || !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if !p.mirrorPending() {
		return
	}
	if err := p.mirror(ctx); err != nil {
		p.log.Error(err, "configuration file still behind the runtime; a restart of HAProxy would lose runtime changes")
		return
	}
	p.markClean()
	p.log.Info("configuration file caught up with the runtime changes")
}

// canonicalBackend fills a backend's defaults as model.Canonical does.
func canonicalBackend(b model.Backend) model.Backend {
	l := model.Canonical(&model.LoadBalancer{Listeners: []model.Listener{{Backends: []model.Backend{b}}}})
	return l.Listeners[0].Backends[0]
}
