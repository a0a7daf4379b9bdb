package upstream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// StartHAProxy starts the cloud's HAProxy of dir (NewHAProxy's layout) in
// master-worker mode through binary, with the configuration of no load
// balancers, and waits until its worker answers on the admin socket. The
// cloud starts its load balancer itself, as a cloud runs its own: in the
// lab's upstream and recipe modes zerodrop's HAProxy provider has no part in
// the baseline. binary may be a wrapper (the lab's runs HAProxy in the load
// balancer's network namespace and moves the master socket behind its
// counting proxy). Its Stop stops the master and its workers.
func StartHAProxy(ctx context.Context, dir, binary string) (*supervisor.Process, error) {
	h := NewHAProxy(dir, binary)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cfg, err := h.render(State{})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(h.Config, cfg, 0o644); err != nil {
		return nil, err
	}
	p, err := supervisor.Start(supervisor.Spec{Name: binary, Log: filepath.Join(dir, "haproxy.log"), Grace: 5 * time.Second,
		Args: []string{"-W", "-S", h.MasterSocket + ",mode,600", "-f", h.Config}})
	if err != nil {
		return nil, fmt.Errorf("start the cloud's HAProxy: %w", err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, h.ReloadTimeout, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			log, _ := os.ReadFile(filepath.Join(dir, "haproxy.log"))
			return false, fmt.Errorf("the cloud's HAProxy exited at start: %s", strings.TrimSpace(string(log)))
		}
		running, err := h.Running(ctx)
		last = err
		return err == nil && running == description(cfg), nil
	})
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("the cloud's HAProxy not ready: %w (last: %v)", err, last)
	}
	return p, nil
}
