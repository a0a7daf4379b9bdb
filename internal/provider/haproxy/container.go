package haproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ContainerArgs is how HAProxy runs as a container of its own, next to the
// zerodrop process that writes it (an HAProxy data-plane replica): the
// master in the foreground (the container's main process; its workers log to
// the container's output), the master CLI and the configuration in dir. The
// zerodrop process attaches with AdminSocket, MasterSocket and ConfigFile set
// to the files of dir (Paths), and never starts an HAProxy of its own: when
// this one is gone the kubelet restarts the container, which reads the
// configuration and server-state file zerodrop last wrote.
//
// With a worker user (PrepareWorkerUser wrote its file), the file comes
// first: the master, which stays root to bind the listeners and to re-execute
// itself on a reload, reads both files on every start and reload, so the
// workers of every configuration zerodrop writes drop root, while the
// configuration zerodrop renders (and checks) stays the same everywhere.
func ContainerArgs(dir string, user *WorkerUser) ([]string, error) {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	if user == nil {
		return masterArgs(ps), nil
	}
	return []string{"-W", "-S", ps.master + ",mode,600", "-f", workerUserFile(ps.dir), "-f", ps.config}, nil
}

// masterArgs run HAProxy's master in master-worker mode with its master CLI
// and configuration in the state directory: ContainerArgs, and the owned
// HAProxy's command line (with a pid file).
func masterArgs(ps paths) []string {
	return []string{"-W", "-S", ps.master + ",mode,600", "-f", ps.config}
}

// Paths are the files of a state directory the attaching zerodrop process
// names (Options.AdminSocket, MasterSocket, ConfigFile).
func Paths(dir string) (admin, master, config string, err error) {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return "", "", "", err
	}
	return ps.admin, ps.master, ps.config, nil
}

// PrepareContainer makes dir the state directory of an HAProxy started with
// ContainerArgs: it creates it (owner only) and, the first time, writes the
// empty configuration zerodrop renders (the admin socket, the server-state
// file, no listener), which HAProxy starts from. A configuration already
// there (the container restarted in the same pod) is kept: it is the last
// one zerodrop wrote, with every listener and backend.
func PrepareContainer(opts Options) error {
	if opts.Dir == "" {
		return errors.New("haproxy: the state directory is required")
	}
	opts = opts.withDefaults()
	ps, err := resolvePaths(Options{Dir: opts.Dir})
	if err != nil {
		return err
	}
	if err := ensureStateDir(ps.dir); err != nil {
		return err
	}
	if _, err := os.Stat(ps.config); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("haproxy: %w", err)
	}
	p := &Provider{opts: opts, paths: ps}
	cfg, meta, err := p.render(nil)
	if err != nil {
		return err
	}
	return p.writeConfig(cfg, meta)
}

// awaitExternal waits for the HAProxy the Provider attaches to: a container
// of the same pod may start after this process, and restarts on its own.
// Nothing is started here; ctx bounds the wait.
func (p *Provider) awaitExternal(ctx context.Context) (procInfo, error) {
	logged := false
	for {
		info, err := p.procs(ctx)
		if err == nil && len(info.Workers) > 0 {
			return info, nil
		}
		if err == nil {
			err = fmt.Errorf("master %d has no worker", info.Master)
		}
		if !logged {
			p.log.Info("waiting for HAProxy to answer on its master socket", "socket", p.paths.master, "reason", err.Error())
			logged = true
		}
		select {
		case <-ctx.Done():
			return procInfo{}, fmt.Errorf("haproxy: attach to master socket %s: %w (last: %v)", p.paths.master, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
