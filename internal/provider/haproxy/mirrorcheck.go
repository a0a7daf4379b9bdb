package haproxy

import (
	"context"
	"fmt"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// mirrorApplied is mirror for Apply's runtime-only changes, and it checks
// that the runtime it mirrored still has key as Apply made it (target).
//
// The runtime commands and the mirror are not atomic: a reload this Provider
// did not make (an operator's, or one the master runs after reload gave up
// waiting for it) can start a worker from the server-state file written
// before the commands, so the worker serving new connections no longer has
// them — a drain among them. Apply must not report that as done: the error
// wraps provider.ErrConflict, so the controller observes again and re-plans
// at once. The check reuses the mirror's own reading: no read more.
func (p *Provider) mirrorApplied(ctx context.Context, key string, target *model.LoadBalancer) error {
	// The same steps as mirror, which does not return its reading.
	notMirrored := func(err error) error {
		return fmt.Errorf("runtime changes made, configuration not mirrored (retried on the next Observe): %w", err)
	}
	snap, err := p.snapshot(ctx)
	if err != nil {
		return notMirrored(err)
	}
	cfg, meta, err := p.render(snap.all())
	if err != nil {
		return notMirrored(err)
	}
	if err := p.saveServerState(ctx); err != nil {
		return notMirrored(err)
	}
	if err := p.writeConfig(cfg, meta); err != nil {
		return notMirrored(err)
	}
	if fix := model.Diff(snap.loadBalancer(key), target); !fix.Empty() {
		return fmt.Errorf("HAProxy lost the changes before they were mirrored (a reload or a writer not of this Provider?); still to do: %s: %w", fix, provider.ErrConflict)
	}
	return nil
}
