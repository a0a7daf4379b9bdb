package awsdp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// Config says which namespace to program from which emulator.
type Config struct {
	// NS is the load-balancer namespace; only it is changed.
	NS *netlab.Netns
	// Emulator: every NLB it stores is programmed.
	Emulator *awsapi.Emulator
	// Probes, when set, is the emulator's Options.Probe (Probes.Check):
	// the data plane probes every registered target and records the
	// results there. Nil: no probing; the emulator's own Probe decides.
	Probes *Probes
	// Frontends is where the NLBs' addresses come from, one each (the
	// prefix's first and last addresses are not used). Required.
	Frontends netip.Prefix
	// IdleTimeout is how long an established connection is kept without
	// a packet (default DefaultIdleTimeout; whole seconds). It is the
	// kernel's clock, whatever the emulator's.
	IdleTimeout time.Duration
	// ProbeScale multiplies every health check's interval and timeout
	// (default 1): a world whose emulator clock runs faster than real
	// time probes as often as that clock asks.
	ProbeScale float64
	// Poll is how often the emulator's state is read (default 200 ms):
	// target health moves with its clock, so the data plane follows it by
	// reading, not by being told.
	Poll time.Duration
	// Logf, if set, gets a line for each programming and each change of
	// a health check's result.
	Logf func(format string, args ...any)
}

// DefaultIdleTimeout is an NLB's TCP idle timeout: 350 s by default (NLB
// docs, "Connection idle timeout"; a client or target that sends data
// after it gets a TCP reset).
const DefaultIdleTimeout = 350 * time.Second

// DefaultPoll is Config.Poll's default.
const DefaultPoll = 200 * time.Millisecond

// Target is one target of a listener as the data plane has programmed it.
type Target struct {
	ID   string         // the instance ID
	Addr netip.AddrPort // where its connections go
	// State is the target's state as the data plane sees it: the
	// emulator's, the propagation time ago (unused: not registered then).
	State awsapi.State
	// Receiving: new connections go to it. Reset: its established
	// connections are answered with a reset.
	Receiving, Reset bool
}

// ErrUnknownListener: no listener takes that frontend address and port in
// the programmed state.
var ErrUnknownListener = errors.New("awsdp: no such listener programmed")

// DataPlane is a programmed namespace. Its methods are safe for concurrent
// use.
type DataPlane struct {
	cfg Config
	ns  *netlab.Netns

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the program loop has ended

	mu        sync.Mutex
	frontends map[string]netip.Addr // by DNS name, never taken back
	view      []listener            // as last programmed
	lastErr   error

	// Owned by the program loop (and New/Close around it).
	probers   map[probeKey]*prober
	lo        *netlab.LoAddrs // frontend addresses added to lo
	chains    []string
	script    string // the last transaction applied, to skip repeats
	full      map[string]bool
	skipped   map[string]bool
	seed      uint32
	resetPrev map[flowKey]bool      // reset in the last programming (conntrack.go)
	forgot    map[flowKey]bool      // their connections forgotten since
	changed   *netlab.SysctlChanges // sysctls set, with their old values
	table     bool                  // the nft table exists

	close func() error // teardown, once
}

// New programs cfg.NS from the NLBs stored now and follows the emulator
// until Close. On error everything made is already removed.
func New(ctx context.Context, cfg Config) (_ *DataPlane, err error) {
	if cfg.NS == nil || cfg.Emulator == nil || !cfg.Frontends.IsValid() || !cfg.Frontends.Addr().Is4() {
		return nil, errors.New("awsdp: Config needs NS, Emulator and an IPv4 Frontends prefix")
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.IdleTimeout < time.Second {
		return nil, fmt.Errorf("awsdp: idle timeout %s: at least 1s", cfg.IdleTimeout)
	}
	if cfg.ProbeScale == 0 {
		cfg.ProbeScale = 1
	}
	if cfg.ProbeScale < 0 {
		return nil, fmt.Errorf("awsdp: negative probe scale %g", cfg.ProbeScale)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	d := &DataPlane{cfg: cfg, ns: cfg.NS, done: make(chan struct{}), frontends: map[string]netip.Addr{},
		probers: map[probeKey]*prober{}, full: map[string]bool{}, skipped: map[string]bool{},
		resetPrev: map[flowKey]bool{}, forgot: map[flowKey]bool{},
		seed: rand.Uint32(), lo: cfg.NS.NewLoAddrs()}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.close = sync.OnceValue(d.teardown)
	defer func() {
		if err != nil {
			close(d.done) // the loop never started
			if cerr := d.teardown(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("teardown after failed setup: %w", cerr))
			}
		}
	}()
	all := append(slices.Clone(sysctls), netlab.Sysctl{Key: idleSysctl, Value: strconv.Itoa(int(cfg.IdleTimeout.Seconds()))})
	if d.changed, err = d.ns.ChangeSysctls(all); err != nil {
		return nil, fmt.Errorf("awsdp: %w", err)
	}
	if err := d.ns.NFT(ctx, setupScript()); err != nil {
		return nil, fmt.Errorf("awsdp: create table: %w", err)
	}
	d.table = true
	if err := d.sync(ctx); err != nil {
		return nil, err
	}
	go d.loop()
	return d, nil
}

// loop reads the emulator every Poll and programs what changed, until
// Close.
func (d *DataPlane) loop() {
	defer close(d.done)
	defer d.stopProbers()
	tick := time.NewTicker(d.cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-tick.C:
		}
		err := d.sync(d.ctx)
		if d.ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
		if err != nil {
			d.logf("awsdp: %v (retrying)", err)
		}
	}
}

// sync reads the emulator, gives new NLBs their frontends, runs the
// probers the model wants and programs its listeners when the ruleset
// differs from the one applied.
func (d *DataPlane) sync(ctx context.Context) error {
	s := d.cfg.Emulator.Snapshot()
	var names []string
	for _, lb := range s.LoadBalancers {
		names = append(names, lb.DNSName)
	}
	d.mu.Lock()
	full := assignFrontends(d.frontends, names, d.cfg.Frontends)
	frontends := make(map[string]netip.Addr, len(d.frontends))
	for n, a := range d.frontends {
		frontends[n] = a
	}
	d.mu.Unlock()
	for _, n := range full {
		if !d.full[n] {
			d.full[n] = true
			d.logf("awsdp: no frontend address left in %s for %s", d.cfg.Frontends, n)
		}
	}
	m := buildModel(s, frontends, d.cfg.ProbeScale)
	for _, sk := range m.skipped {
		if !d.skipped[sk] {
			d.skipped[sk] = true
			d.logf("awsdp: not programmed: %s", sk)
		}
	}
	d.syncProbers(m.probes)
	script, made := render(m.listeners, d.seed, d.chains)
	if script != d.script || !slices.Equal(made, d.chains) {
		var fes []netip.Addr
		for _, l := range m.listeners {
			if !slices.Contains(fes, l.Frontend) {
				fes = append(fes, l.Frontend)
			}
		}
		if err := d.lo.Sync(ctx, fes); err != nil {
			return fmt.Errorf("awsdp: frontend addresses: %w", err)
		}
		if err := d.ns.NFT(ctx, script); err != nil {
			d.script = ""
			return fmt.Errorf("awsdp: program %d listeners: %w", len(m.listeners), err)
		}
		d.chains = made
		// The same model renders the same script against the chains it
		// made: the next poll skips it.
		d.script, _ = render(m.listeners, d.seed, made)
		d.logf("awsdp: programmed %s", describe(m.listeners))
	}
	d.mu.Lock()
	d.view = m.listeners
	d.mu.Unlock()
	return d.forgetResets(m.listeners)
}

// describe is a programming's log line: each listener's receiving and
// reset targets.
func describe(ls []listener) string {
	var parts []string
	for _, l := range ls {
		var recv, reset []string
		for _, t := range l.Targets {
			if t.Receiving {
				recv = append(recv, t.ID)
			}
			if t.Reset {
				reset = append(reset, t.ID)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s:%d→%v reset=%v", l.LB, l.Frontend, l.Port, recv, reset))
	}
	if len(parts) == 0 {
		return "no listener"
	}
	return strings.Join(parts, " ")
}

// Frontend is the address given to the NLB whose DNS name is dnsName;
// false until the data plane has seen that NLB.
func (d *DataPlane) Frontend(dnsName string) (netip.Addr, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.frontends[dnsName]
	return a, ok
}

// Targets is the programmed view of the listener on frontend:port: its
// targets as of the last read of the emulator (the ruleset reflects a
// change one poll after the emulator's clock makes it).
func (d *DataPlane) Targets(frontend netip.Addr, port uint16) ([]Target, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.view {
		if l.Frontend == frontend && l.Port == port {
			return slices.Clone(l.Targets), nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownListener, netip.AddrPortFrom(frontend, port))
}

// Err is the last programming's error (nil once one succeeds again).
func (d *DataPlane) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// Close stops following the emulator, stops every probe and removes every
// table, address and sysctl change the data plane made. Idempotent.
func (d *DataPlane) Close() error {
	return d.close()
}

// teardown undoes whatever exists, each step even when another fails.
func (d *DataPlane) teardown() error {
	d.cancel()
	<-d.done
	d.stopProbers() // probers started by a failed New's sync
	// A fresh context: the caller's may be what ended the run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if d.table {
		if err := d.ns.NFT(ctx, fmt.Sprintf("delete table ip %s\n", table)); err != nil {
			errs = append(errs, err)
		} else {
			d.table = false
		}
	}
	if err := d.lo.Sync(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	if err := d.changed.Restore(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *DataPlane) logf(format string, args ...any) {
	if d.cfg.Logf != nil {
		d.cfg.Logf(format, args...)
	}
}
