// Package haproxy implements provider.Provider with a real HAProxy (2.6+)
// in master-worker mode.
//
// Backend changes (servers added, removed, weighted, drained) go through the
// runtime API on the admin stats socket and never reload HAProxy. Frontend
// changes (a listener created, changed or deleted) re-render the
// configuration, validate it with `haproxy -c` (in HAProxy's container, when
// attached to one: ValidateSocket) and reload through the master
// socket: the new worker takes the listening sockets over and old workers
// finish their connections, so no connection is dropped. Every runtime change
// is mirrored into the configuration file and the server-state file, so that
// a reload or a restart of HAProxy keeps it.
//
// Observe reads the runtime API, never memory: a Provider started after a
// controller restart sees exactly what the previous one left, and
// model.Diff(observed, desired) is empty when nothing changed. See
// docs/haproxy.md for the mapping and the HAProxy 2.6 behaviour it relies on.
package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Name is the provider's name.
const Name = "haproxy"

// Options configure a Provider.
//
// With only Dir set, the provider owns an HAProxy: it keeps the
// configuration, sockets, pid file and server-state file in Dir, attaches to
// the master already running for Dir (a restarted controller does not restart
// HAProxy) or starts one. With AdminSocket and MasterSocket set, it attaches
// to an HAProxy someone else started and never starts one; ConfigFile is then
// the configuration file that HAProxy was started with, which the provider
// owns and rewrites (other proxies in it are dropped at the first reload).
type Options struct {
	// Dir is the state directory. Default: the directory of ConfigFile.
	Dir string
	// Binary is the haproxy executable, used to start HAProxy and to validate
	// configurations (without ValidateSocket). Default "haproxy" from PATH.
	Binary string
	// AdminSocket is the stats socket (level admin) of an HAProxy to attach
	// to. Default Dir/admin.sock.
	AdminSocket string
	// MasterSocket is the master CLI socket (`-S`) of that HAProxy. Default
	// Dir/master.sock.
	MasterSocket string
	// ConfigFile is the configuration file the provider renders. Default
	// Dir/haproxy.cfg.
	ConfigFile string
	// Hooks count reads and writes (one per runtime command, one per reload).
	Hooks provider.Hooks
	// Log receives the provider's few log lines; detail at V(1).
	Log logr.Logger
	// StopOnClose makes Close stop the HAProxy master and its workers.
	StopOnClose bool
	// IdleTimeout is HAProxy's client and server timeout: how long an idle
	// connection lives. Default 10 minutes.
	IdleTimeout time.Duration
	// HardStopAfter bounds how long an old worker may keep serving its
	// connections after a reload (HAProxy's hard-stop-after): then it exits
	// and the connections still on it are closed. Zero: no bound.
	HardStopAfter time.Duration
	// MaxOldWorkers bounds how many reloads a worker may outlive (HAProxy's
	// mworker-max-reloads): at each reload the master ends (SIGTERM, its
	// connections closed) every old worker that has outlived more, so at
	// most this many old workers, each holding a whole configuration, live
	// beside the current one. Zero: derived from MemoryLimit (oldWorkerBound),
	// or no bound without it.
	MaxOldWorkers int
	// MemoryLimit is the memory HAProxy may use (its container's limit), in
	// bytes: with MaxOldWorkers zero, each reload bounds the old workers to
	// what fits in it beside the configuration rendered. Zero: none.
	MemoryLimit int64
	// NoStrictLimits renders `no strict-limits`: HAProxy starts even when
	// it cannot raise its open-file limit to what it computes it needs (a
	// descriptor per listener and per checked server besides two per
	// connection), with a warning, instead of refusing to start. Default
	// false: a limit too low fails loudly, on every reload.
	NoStrictLimits bool
	// ReloadTimeout bounds starting HAProxy and waiting for the new worker
	// after a reload. Default 10s.
	ReloadTimeout time.Duration
	// ReadBatchWindow is how long one runtime snapshot serves Observe and
	// Backends (default DefaultReadBatchWindow; negative: every call reads).
	ReadBatchWindow time.Duration
	// ValidateSocket is the socket of a validator that checks each
	// configuration before it is loaded (`zerodrop haproxy` serves one in
	// HAProxy's container: ServeValidation), so that the check's memory is
	// that container's. Empty: `haproxy -c` runs as a child of this
	// process, in its container.
	ValidateSocket string
	// LogMaxBytes bounds the owned master's haproxy.log: at a reload, a
	// log past it moves to haproxy.log.1 and starts again empty (default
	// DefaultLogMaxBytes; negative: never cut).
	LogMaxBytes int64
}

// Provider drives one HAProxy instance that serves any number of load
// balancers. It is safe for concurrent use.
type Provider struct {
	opts   Options
	binary string
	paths  paths
	log    logr.Logger
	hooks  provider.Hooks
	admin  runtimeClient
	master runtimeClient

	// reading is held while a runtime snapshot is read (snapshot): one
	// reading at a time, each megabytes at thousands of load balancers.
	reading sync.Mutex
	// mu serialises the writes of this Provider: every key shares the one
	// configuration file and the reloads. A group reload's leader holds it
	// for the whole reload; the members wait without it.
	mu sync.Mutex
	// reloading counts this Provider's reloads under way (reload): the
	// master re-executes then and does not answer, while the previous
	// worker serves (Alive).
	reloading atomic.Int32

	cmd     *exec.Cmd     // the master, when this Provider started it
	cmdDone chan struct{} // closed when cmd has exited

	closeOnce sync.Once
	closeErr  error

	batch readBatch
	old   oldConns

	// group joins concurrent reloads into one (group commit).
	group reloadGroup
	// refused are the keys whose last reload HAProxy refused (under mu):
	// their next reload is their own (group.go, lead).
	refused map[string]bool
	// check is the runtime snapshot the version checks share (under mu).
	check checkSnapshot

	// dirty is set while runtime changes may be missing from the
	// configuration file; the mirror-pending file says the same to other
	// Providers on this HAProxy (another replica, a restarted controller).
	dirty atomic.Bool

	// worker is the PID of the worker that serves now: the one whose
	// answers the admin socket's exchanges accept (see exchange).
	worker atomic.Int64
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Lister   = (*Provider)(nil)
)

// New returns a Provider attached to a running HAProxy, starting one first
// when Options ask for an owned instance and none is running.
func New(ctx context.Context, opts Options) (*Provider, error) {
	opts = opts.withDefaults()
	external := opts.AdminSocket != "" || opts.MasterSocket != ""
	if external && (opts.AdminSocket == "" || opts.MasterSocket == "" || opts.ConfigFile == "") {
		return nil, errors.New("haproxy: attaching needs AdminSocket, MasterSocket and ConfigFile")
	}
	ps, err := resolvePaths(opts)
	if err != nil {
		return nil, err
	}
	binary, err := exec.LookPath(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("haproxy: %w (hack/setup-haproxy.sh installs it)", err)
	}
	p := &Provider{
		opts:   opts,
		binary: binary,
		paths:  ps,
		log:    opts.Log.WithValues("provider", Name),
		hooks:  opts.Hooks,
		admin:  runtimeClient{path: ps.admin},
		master: runtimeClient{path: ps.master},
	}
	p.batch.window = opts.ReadBatchWindow
	if external {
		info, err := p.awaitExternal(ctx)
		if err != nil {
			return nil, err
		}
		if err := p.waitReady(ctx, info.Workers[0]); err != nil {
			return nil, err
		}
		return p, nil
	}
	if err := p.startOrAttach(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// withDefaults fills the Options left zero that have a default.
func (opts Options) withDefaults() Options {
	if opts.Binary == "" {
		opts.Binary = "haproxy"
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	if opts.ReloadTimeout <= 0 {
		opts.ReloadTimeout = 10 * time.Second
	}
	if opts.ReadBatchWindow == 0 {
		opts.ReadBatchWindow = DefaultReadBatchWindow
	}
	if opts.LogMaxBytes == 0 {
		opts.LogMaxBytes = DefaultLogMaxBytes
	}
	return opts
}

// Close releases the Provider. With StopOnClose it stops HAProxy (master and
// workers); otherwise HAProxy keeps serving, for the next Provider to attach
// to. Close is idempotent.
func (p *Provider) Close() error {
	p.closeOnce.Do(func() {
		if !p.opts.StopOnClose {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*p.opts.ReloadTimeout)
		defer cancel()
		p.closeErr = p.stop(ctx)
	})
	return p.closeErr
}

// Name returns "haproxy".
func (p *Provider) Name() string { return Name }

// GroupWidth is how many calls may wait for one group reload or mirror
// (provider.Grouper): a replica that builds 5,000 load balancers from
// nothing does it in tens of reloads, not 1,250 at 4 workers, each reload
// validating and loading the whole configuration. A waiting call holds
// little (a goroutine and its plan).
func (p *Provider) GroupWidth() int { return GroupWidth }

// GroupWidth is Provider.GroupWidth's answer.
const GroupWidth = 1024

// Unsupported returns UDP and SCTP: open-source HAProxy balances TCP only.
func (p *Provider) Unsupported() map[model.Protocol]bool { return UnsupportedProtocols() }

// UnsupportedProtocols is what Unsupported returns, for a process that
// writes no HAProxy itself (the control role of a data plane of replicas).
func UnsupportedProtocols() map[model.Protocol]bool {
	return map[model.Protocol]bool{model.UDP: true, model.SCTP: true}
}

// ConfigFile is the path of the configuration file the provider renders.
func (p *Provider) ConfigFile() string { return p.paths.config }

// read sends one read-only command to the admin socket.
func (p *Provider) read(ctx context.Context, op, command string) (string, error) {
	return p.exchange(ctx, func() { p.hooks.OnRead(op) }, command)
}

// readStream is read with the reply handed to consume as it arrives
// (exchangeStream), for the readings that are megabytes.
func (p *Provider) readStream(ctx context.Context, op, command string, consume func(*bufio.Reader) error) error {
	return p.exchangeStream(ctx, func() { p.hooks.OnRead(op) }, consume, command)
}

// write sends one mutating command to the admin socket.
func (p *Provider) write(ctx context.Context, op, command string) (string, error) {
	return p.writeChain(ctx, []string{op}, []string{command})
}

// writeChain sends mutating commands on one line (runtimeClient.chain),
// counted as one write each.
func (p *Provider) writeChain(ctx context.Context, ops, commands []string) (string, error) {
	return p.exchange(ctx, func() {
		for _, op := range ops {
			p.batch.writes.Add(1)
			p.hooks.OnWrite(op)
		}
	}, commands...)
}

// render renders the configuration for the given load balancers.
func (p *Provider) render(lbs map[string]*model.LoadBalancer) (cfg, meta []byte, err error) {
	proxies := proxySpecs(lbs)
	cfg, meta, err = render(renderInput{
		AdminSocket:    p.paths.admin,
		StateFile:      p.paths.state,
		MapFile:        p.paths.meta,
		IdleTimeout:    p.opts.IdleTimeout,
		HardStopAfter:  p.opts.HardStopAfter,
		NoStrictLimits: p.opts.NoStrictLimits,
		Proxies:        proxies,
		MaxOldWorkers:  oldWorkerBound(p.opts.MaxOldWorkers, p.opts.MemoryLimit, proxies),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("haproxy: %w", err)
	}
	return cfg, meta, nil
}
