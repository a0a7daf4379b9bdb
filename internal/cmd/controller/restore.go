package controller

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// restorePeriod is how often a replica checks that its HAProxy still runs.
const restorePeriod = 2 * time.Second

// restoreRunnable restores the HAProxy when it is gone, in every replica.
type restoreRunnable struct {
	hp  *haproxy.Provider
	log logr.Logger
}

func restoreLoop(hp *haproxy.Provider, log logr.Logger) manager.Runnable {
	return &restoreRunnable{hp: hp, log: log}
}

// NeedLeaderElection: every replica watches the HAProxy.
func (r *restoreRunnable) NeedLeaderElection() bool { return false }

func (r *restoreRunnable) Start(ctx context.Context) error {
	t := time.NewTicker(restorePeriod)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		restarted, err := r.hp.Restore(cctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				r.log.Error(err, "HAProxy is gone and could not be started again; retrying")
			}
			failing = true
		case restarted:
			r.log.Info("HAProxy was gone; started it again from its configuration and server-state file")
			failing = false
		default:
			failing = false
		}
	}
}
