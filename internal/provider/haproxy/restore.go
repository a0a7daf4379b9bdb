package haproxy

import (
	"context"
	"errors"
	"fmt"
)

// Alive reports whether the HAProxy serves: its master answers on the master
// socket and has a worker. A killed worker takes its master with it
// (HAProxy's master exits when a worker fails), so Alive then fails too.
// While a reload of this Provider is under way it answers yes without
// asking: the master re-executes then and does not answer (seconds at
// thousands of listeners) while the previous worker serves; the reload
// itself finds out whether a worker took over. A data-plane replica whose
// refused Service is retried back to back was otherwise not ready for as
// long as the retries lasted (39 s at 500 Services, procmem -refused 1).
func (p *Provider) Alive(ctx context.Context) error {
	if p.reloading.Load() > 0 {
		return nil
	}
	info, err := p.procs(ctx)
	if err != nil {
		return fmt.Errorf("haproxy: master not answering: %w", err)
	}
	if len(info.Workers) == 0 {
		return errors.New("haproxy: the master has no worker")
	}
	return nil
}

// Restore starts the HAProxy this Provider owns again when it is gone, from
// the configuration file and the server-state file — the mirror of every
// runtime change, drain flags included — so it comes back with the backends
// and states it had. It reports whether it started one. An HAProxy the
// Provider attached to (AdminSocket and MasterSocket given) is not its to
// start: Restore returns Alive's error. Another replica restoring the same
// state directory at once is excluded by the directory's lock.
func (p *Provider) Restore(ctx context.Context) (bool, error) {
	if p.Alive(ctx) == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A reload of ours (under p.mu) re-executes the master, which does not
	// answer meanwhile: at 5,000 listeners for seconds. Ask again once no
	// reload is under way, so that a reload is not taken for HAProxy gone.
	aliveErr := p.Alive(ctx)
	if aliveErr == nil {
		return false, nil
	}
	if p.opts.AdminSocket != "" || p.opts.MasterSocket != "" {
		return false, aliveErr
	}
	// What was read from the gone HAProxy is no longer true.
	p.batch.writes.Add(1)
	p.forgetChecked()
	p.old.reloads.Add(1)
	if err := p.startOrAttach(ctx); err != nil {
		return false, fmt.Errorf("haproxy: restore after %v: %w", aliveErr, err)
	}
	p.batch.writes.Add(1)
	return true, nil
}
