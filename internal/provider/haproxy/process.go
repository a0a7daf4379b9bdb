package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// paths are the files of one HAProxy instance.
type paths struct {
	dir    string
	config string
	admin  string
	master string
	pid    string
	state  string // server-state file
	meta   string // listener metadata map
	log    string // the owned master's stdout and stderr
	lock   string
	// pending exists while runtime changes may be missing from the
	// configuration file (see markDirty).
	pending string
}

func resolvePaths(o Options) (paths, error) {
	dir := o.Dir
	if dir == "" && o.ConfigFile != "" {
		dir = filepath.Dir(o.ConfigFile)
	}
	if dir == "" {
		return paths{}, errors.New("haproxy: Options.Dir (or ConfigFile) is required")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return paths{}, fmt.Errorf("haproxy: state dir: %w", err)
	}
	p := paths{
		dir:     dir,
		config:  filepath.Join(dir, "haproxy.cfg"),
		admin:   filepath.Join(dir, "admin.sock"),
		master:  filepath.Join(dir, "master.sock"),
		pid:     filepath.Join(dir, "haproxy.pid"),
		state:   filepath.Join(dir, "server-state"),
		meta:    filepath.Join(dir, "listeners.map"),
		log:     filepath.Join(dir, "haproxy.log"),
		lock:    filepath.Join(dir, "lock"),
		pending: filepath.Join(dir, "mirror-pending"),
	}
	for dst, src := range map[*string]string{&p.config: o.ConfigFile, &p.admin: o.AdminSocket, &p.master: o.MasterSocket} {
		if src != "" {
			if *dst, err = filepath.Abs(src); err != nil {
				return paths{}, fmt.Errorf("haproxy: %s: %w", src, err)
			}
		}
	}
	return p, nil
}

// startOrAttach makes sure an HAProxy master serves the state dir: when one
// already answers on the master socket (the controller restarted), the
// provider attaches to it; otherwise it starts one from the configuration
// on disk (rendering an empty one the first time).
func (p *Provider) startOrAttach(ctx context.Context) error {
	if err := ensureStateDir(p.paths.dir); err != nil {
		return err
	}
	// Two controllers starting at once must not start two masters.
	lock, err := os.OpenFile(p.paths.lock, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("haproxy: lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("haproxy: lock %s: %w", p.paths.lock, err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	for _, sock := range []string{p.paths.master, p.paths.admin} {
		if err := checkOwnSocket(sock); err != nil {
			return err
		}
	}
	info, err := p.procs(ctx)
	if err != nil {
		// A master that is reloading (it re-executes itself and reopens its
		// socket) does not answer for a moment; starting a second one then
		// would leave two masters serving the same addresses.
		if pid, ok := ownedMaster(p.paths.dir, p.paths.pid); ok {
			if info, err = p.awaitMaster(ctx, pid); err != nil && p.alive(pid) {
				return err
			}
		}
	}
	if err == nil {
		if len(info.Workers) == 0 {
			return fmt.Errorf("haproxy: master %d of %s has no worker: %s", info.Master, p.paths.dir, p.logTail())
		}
		p.log.Info("attached to running HAProxy", "master", info.Master, "workers", info.Workers)
		return p.waitReady(ctx, info.Workers[0])
	}
	if _, err := os.Stat(p.paths.config); errors.Is(err, os.ErrNotExist) {
		cfg, meta, err := p.render(nil)
		if err != nil {
			return err
		}
		if err := p.writeConfig(cfg, meta); err != nil {
			return err
		}
	}
	if err := p.validate(ctx, p.paths.config); err != nil {
		return err
	}
	logFile, err := os.OpenFile(p.paths.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("haproxy: log file: %w", err)
	}
	defer logFile.Close()
	// Not exec.CommandContext: the master outlives ctx (and, without
	// StopOnClose, the controller). Its own session keeps a terminal's
	// signals away from it. Not internal/supervisor either, the project's
	// one launcher for everything else: that one supervises a child (a
	// group killed on stop, reaped by a goroutine, optionally dying with
	// its parent), while this master is handed over to its PID file and
	// whoever owns the directory next (StopDir), and the production binary
	// keeps its process code to this package.
	cmd := exec.Command(p.binary, append(masterArgs(p.paths), "-p", p.paths.pid)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("haproxy: start %s: %w", p.binary, err)
	}
	p.cmd, p.cmdDone = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmdDone)
	p.log.Info("started HAProxy", "master", cmd.Process.Pid, "config", p.paths.config)

	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	for {
		if info, err := p.procs(ctx); err == nil && len(info.Workers) > 0 {
			return p.waitReady(ctx, info.Workers[0])
		}
		select {
		case <-p.cmdDone:
			return fmt.Errorf("haproxy: exited at start: %s", p.logAlerts())
		case <-ctx.Done():
			return fmt.Errorf("haproxy: not ready after start: %w: %s", ctx.Err(), p.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady waits until the admin socket is answered by worker pid.
func (p *Provider) waitReady(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	want := fmt.Sprintf("Pid: %d", pid)
	var last error
	for {
		p.hooks.OnRead("show-info")
		reply, err := p.admin.do(ctx, "show info")
		if err == nil {
			var got int
			if got, err = infoPid(reply); err == nil && got == pid {
				p.worker.Store(int64(pid))
				return nil
			}
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("admin socket answered by another process (want %s)", want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy: admin socket %s: %w (last: %v)", p.paths.admin, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runCheck runs `binary -c -f file` (validator.go) and returns HAProxy's alerts. Not
// with -q: that silences the alerts too, and a refusal must say why.
// rejected is HAProxy's own no; any other error means the check did not
// run to its end (not started, killed by a timeout or the memory limit)
// and says nothing about the configuration.
func runCheck(ctx context.Context, binary, file string) (rejected bool, alerts string, err error) {
	out, err := exec.CommandContext(ctx, binary, "-c", "-f", file).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, "", nil
	case errors.As(err, &exit) && exit.Exited() && ctx.Err() == nil:
		return true, fmt.Sprintf("%v: %s", err, alertLines(strings.TrimSpace(string(out)), 0)), nil
	default:
		return false, "", fmt.Errorf("haproxy: checking %s: %w: %s", file, errors.Join(err, ctx.Err()), alertLines(strings.TrimSpace(string(out)), 5))
	}
}

// StartDetached starts name with args as a child this process neither
// waits for nor reaps, with extra as its descriptor 3 and out as its
// output: `zerodrop haproxy` starts its validator so just before it
// becomes HAProxy's master, which reaps it (a goroutine waiting for it
// would not survive the exec). It returns the child's PID.
func StartDetached(name string, args []string, extra, out *os.File) (int, error) {
	cmd := exec.Command(name, args...)
	cmd.ExtraFiles = []*os.File{extra}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	return pid, cmd.Process.Release()
}

// reload switches HAProxy to a new configuration without dropping a
// connection: validate it, save the servers' runtime state, write it, ask the
// master to reload, and wait for the new worker to answer. On any error
// before the reload command nothing has changed; the files on disk are only
// replaced once the new configuration has passed `haproxy -c`.
func (p *Provider) reload(ctx context.Context, cfg, meta []byte) error {
	if p.stopping() {
		return ErrStopping
	}
	start := time.Now()
	// Validate a candidate that points at a candidate map, so that a bad
	// configuration leaves both files as they were.
	candMeta := p.paths.meta + ".new"
	candCfg := bytes.ReplaceAll(cfg, []byte("map("+p.paths.meta+")"), []byte("map("+candMeta+")"))
	if err := writeFileAtomic(candMeta, meta); err != nil {
		return err
	}
	defer os.Remove(candMeta)
	if err := writeFileAtomic(p.paths.config+".new", candCfg); err != nil {
		return err
	}
	defer os.Remove(p.paths.config + ".new")
	if err := p.validate(ctx, p.paths.config+".new"); err != nil {
		return err
	}
	before, err := p.procs(ctx)
	if err != nil {
		return fmt.Errorf("haproxy: reload: %w", err)
	}
	if err := p.saveServerState(ctx); err != nil {
		return fmt.Errorf("haproxy: reload: %w", err)
	}
	prevCfg, errCfg := os.ReadFile(p.paths.config)
	prevMeta, errMeta := os.ReadFile(p.paths.meta)
	restore := func() {
		// HAProxy keeps running the previous configuration: so must the files,
		// for the next reload and for a cold start.
		if errCfg == nil && errMeta == nil {
			if err := p.writeConfig(prevCfg, prevMeta); err != nil {
				p.log.Error(err, "restoring the previous configuration")
			}
		}
	}
	if err := p.writeConfig(cfg, meta); err != nil {
		return err
	}
	p.batch.writes.Add(1)
	p.forgetChecked()
	// Old-worker readings taken before the new worker took over miss the
	// worker that is now old: discard them when it is done, too.
	p.old.reloads.Add(1)
	defer p.old.reloads.Add(1)
	p.reloading.Add(1)
	defer p.reloading.Add(-1)
	p.hooks.OnWrite("reload")
	p.rotateLog()
	logFrom := p.logSize()
	reply, err := p.master.do(ctx, "reload")
	if err != nil {
		return fmt.Errorf("haproxy: reload: %w", err)
	}
	if strings.TrimSpace(reply) != "" {
		// 2.6 answers nothing: the master re-executes and drops the connection.
		p.log.Info("unexpected reply to reload", "reply", reply)
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	for {
		info, err := p.procs(ctx)
		if err == nil {
			if info.Failed > before.Failed {
				restore()
				return fmt.Errorf("haproxy: reload failed, previous configuration still serving: %w: %s", errRejected, p.reloadAlerts(ctx, logFrom))
			}
			if info.Reloads > before.Reloads || info.Master != before.Master {
				for _, w := range info.Workers {
					if !slices.Contains(before.Workers, w) {
						if err := p.waitReady(ctx, w); err != nil {
							return err
						}
						p.log.V(1).Info("reloaded", "worker", w, "took", time.Since(start))
						return nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy: no new worker after reload: %w (last show proc error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// saveServerState dumps `show servers state` into the server-state file that
// `load-server-state-from-file` reads on (re)load, so drain, maintenance and
// weight set at run time survive it.
func (p *Provider) saveServerState(ctx context.Context) error {
	text, err := p.read(ctx, "show-servers-state", "show servers state")
	if err != nil {
		return err
	}
	if _, err := parseServersState(text); err != nil {
		return err
	}
	return writeFileAtomic(p.paths.state, []byte(text))
}

// writeConfig replaces the configuration and metadata map files.
func (p *Provider) writeConfig(cfg, meta []byte) error {
	if err := writeFileAtomic(p.paths.meta, meta); err != nil {
		return err
	}
	return writeFileAtomic(p.paths.config, cfg)
}

// stop ends the HAProxy master and its workers: SIGTERM, then SIGKILL for
// whatever is left after the timeout.
func (p *Provider) stop(ctx context.Context) error {
	info, err := p.procs(ctx)
	if err != nil {
		// The master CLI does not answer (a reload under way, its socket
		// gone): the pid file names the master this directory owns, and
		// the master's SIGTERM ends its workers with it.
		pid, ok := ownedMaster(p.paths.dir, p.paths.pid)
		if !ok {
			return fmt.Errorf("haproxy: stop: %w", err)
		}
		if info, err = p.awaitMaster(ctx, pid); err != nil {
			info = procInfo{Master: pid}
		}
	}
	pids := append([]int{info.Master}, append(info.Workers, info.OldWorkers...)...)
	if err := syscall.Kill(info.Master, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("haproxy: stop master %d: %w", info.Master, err)
	}
	deadline := time.Now().Add(p.opts.ReloadTimeout)
	for time.Now().Before(deadline) {
		if !slices.ContainsFunc(pids, p.alive) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range pids {
		if p.alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return fmt.Errorf("haproxy: stop: processes %v did not exit after SIGTERM; killed", pids)
}

// alive reports whether pid is a live process (zombies are dead: the master
// this provider started is reaped by it, another one by init).
func (p *Provider) alive(pid int) bool {
	if p.cmd != nil && p.cmd.Process.Pid == pid {
		select {
		case <-p.cmdDone:
			return false
		default:
			return true
		}
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
		return data[i+2] != 'Z' && data[i+2] != 'X'
	}
	return true
}

// StopDir stops the HAProxy owned in dir, whatever state it is in: through
// its master socket when it answers, else by the master's pid file. Tests and
// the lab call it so that no HAProxy outlives them (an owned HAProxy runs in
// its own session, on purpose, so that it outlives controller restarts).
func StopDir(ctx context.Context, dir string) error {
	p, err := New(ctx, Options{Dir: dir, StopOnClose: true, Log: logr.Discard()})
	if err == nil {
		if err = p.Close(); err == nil {
			return nil
		}
	}
	pid, ok := ownedMaster(dir, filepath.Join(dir, "haproxy.pid"))
	if !ok {
		return err
	}
	// The master and its workers share the master's session and process group.
	if kerr := syscall.Kill(-pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
		return fmt.Errorf("haproxy: stop %s: %w (after %v)", dir, kerr, err)
	}
	return nil
}

// ownedMaster returns the master pid recorded in pidFile when that process is
// alive and is an HAProxy started for dir: a pid file can outlive its process
// and the pid be reused.
func ownedMaster(dir, pidFile string) (int, bool) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("haproxy")) || !bytes.Contains(cmdline, []byte(dir)) {
		return 0, false
	}
	return pid, true
}
