package haproxy

import (
	"context"
	"fmt"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// mirrorRead does mirror's work and returns the runtime reading it mirrored, so that
// the runtime-only Applies it serves can check it (lostChanges) without a
// read more.
func (p *Provider) mirrorRead(ctx context.Context) (*snapshot, error) {
	snap, err := p.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	cfg, meta, err := p.render(snap.unversioned())
	if err != nil {
		return nil, err
	}
	if err := p.saveServerState(ctx); err != nil {
		return nil, err
	}
	if err := p.writeConfig(cfg, meta); err != nil {
		return nil, err
	}
	return snap, nil
}

// lostChanges checks that a reading taken after Apply's runtime-only
// changes (the mirror's, or a group reload's) still has key as Apply made it
// (target).
//
// The runtime commands and the mirror are not atomic: a reload this Provider
// did not make (an operator's, or one the master runs after reload gave up
// waiting for it) can start a worker from the server-state file written
// before the commands, so the worker serving new connections no longer has
// them — a drain among them. Apply must not report that as done: the error
// wraps provider.ErrConflict, so the controller observes again and re-plans
// at once.
func lostChanges(snap *snapshot, key string, target *model.LoadBalancer) error {
	if fix := model.Diff(snap.loadBalancer(key), target); !fix.Empty() {
		return fmt.Errorf("HAProxy lost the changes before they were mirrored (a reload or a writer not of this Provider?); still to do: %s: %w", fix, provider.ErrConflict)
	}
	return nil
}
