// Package azuredp is an Azure load balancer's data plane for the lab: it
// programs a network namespace (the lab's load-balancer host) from the load
// balancers an ARM emulator stores, and forwards packets as Azure's Standard
// Load Balancer does. It is not a proxy: floating-IP rules forward each
// packet unchanged to the backend's address (nftables netdev `fwd`, with a
// flow table of its own, since the backend answers the client directly);
// other rules DNAT to address:backendPort with conntrack. Probes are built
// from the probe documents and run from the namespace, one goroutine per
// backend address on its own phase.
//
// Azure's behaviour it models — new flows only to backends probed up,
// established flows kept when a probe goes down, probeThreshold both ways,
// admin state, noHealthyBackendsBehavior, 5-, 3- and 2-tuple distribution,
// floating IP — is listed with each behaviour's public source, and what is
// not modelled, in docs/azure-dataplane.md.
//
// A pool's members are its addresses (an IP-based pool, as the CCM's
// nodeIP configuration writes) or its backendIPConfigurations (a NIC-based
// pool, the CCM's default), resolved to addresses through Config.Compute.
// What happens to an established flow whose address leaves the pools has
// no public source: Config.PoolFlows keeps it (the default) or resets it.
//
// A change stored in ARM takes effect here only Config.Propagation after the
// write, changes applied in write order. Close removes everything the data
// plane made in the namespace.
package azuredp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// Config says which namespace to program from which load balancers.
type Config struct {
	// NS is the load-balancer namespace; only it is changed.
	NS *netlab.Netns
	// Emulator and ResourceGroup: every load balancer of the group is
	// programmed.
	Emulator      *azurearm.Emulator
	ResourceGroup string
	// Propagation is how long after a write is accepted the data plane
	// applies it (the lab's --lb-propagation; no client can observe it).
	// State already stored when New runs is applied at once.
	Propagation time.Duration
	// ProbeScale multiplies every probe's interval and timeout (default 1).
	// ARM refuses intervals under 5 s; tests probe every second with 0.2.
	ProbeScale float64
	// Compute, when set, resolves the members of NIC-based pools (their
	// backendIPConfigurations) to addresses; without it only pools of IP
	// addresses are programmed. The emulator's compute side
	// (azurecompute.Compute, attached to Emulator) is one.
	Compute IPConfigs
	// PoolFlows is what happens to an established flow whose backend
	// address leaves the rule's pools: PoolFlowsKeep (default) or
	// PoolFlowsReset.
	PoolFlows string
	// Logf, if set, gets a line for each programming and each probe state
	// change.
	Logf func(format string, args ...any)
}

// IPConfigs maps every NIC ipconfig ID, lower-cased, to its private
// address.
type IPConfigs interface {
	IPConfigAddresses() map[string]netip.Addr
}

// What happens to an established flow whose backend address leaves the
// rule's pools (Config.PoolFlows). No public source says what Azure does
// (docs/azure-dataplane.md, "Not modelled"), so the lab runs both.
const (
	// PoolFlowsKeep: the flow continues to the address, as a flow to a
	// backend whose probe went down does (the default).
	PoolFlowsKeep = "keep"
	// PoolFlowsReset: the flow's next packet from the client is answered
	// with a TCP reset from the frontend, and the flow forgotten.
	PoolFlowsReset = "reset"
)

// PoolFlowOptions are Config.PoolFlows' values, the default first.
var PoolFlowOptions = []string{PoolFlowsKeep, PoolFlowsReset}

// maxPending bounds the changes waiting out their propagation delay; past
// it the newest replaces the last waiting one (that state is never shown,
// as if two writes had landed together).
const maxPending = 4096

// maxMarks bounds the backend addresses the data plane has ever forwarded
// to (each has a mark naming its next hop while flows may use it).
const maxMarks = 1 << 16

// DataPlane is a programmed namespace. Its methods are safe for concurrent
// use.
type DataPlane struct {
	cfg Config
	ns  *netlab.Netns

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the program loop has ended

	mu      sync.Mutex
	pending []change                 // write order
	health  map[target]*health       // per probe and address
	view    model                    // the model programmed now, for Health
	elig    map[ruleKey][]netip.Addr // the addresses programmed to get new flows
	lastErr error                    // the last programming's error

	queued chan struct{} // a change was queued
	kicked chan struct{} // a probe state changed

	// Owned by the program loop (and New/Close around it).
	want    model // the model to program (view once programmed)
	probers map[target]*prober
	lo      *netlab.LoAddrs // frontend addresses added to lo
	marks   map[netip.Addr]uint32
	hops    map[uint32]netip.Addr
	retired map[netip.Addr]time.Time // addresses no rule uses, since when
	maxIdle time.Duration
	chains  chainSet
	seed    uint32
	changed *netlab.SysctlChanges // sysctls set, with their old values
	tables  bool                  // the nft tables exist

	unsubscribe func()
	close       func() error // teardown, once
}

// change is the stored state right after one write: the load balancers
// and what their NIC-based pools' members resolve to.
type change struct {
	due       time.Time
	lbs       []*armnetwork.LoadBalancer
	ipconfigs map[string]netip.Addr
}

// New programs cfg.NS from the load balancers stored now and follows every
// later write. On error everything made is already removed.
func New(ctx context.Context, cfg Config) (_ *DataPlane, err error) {
	if cfg.NS == nil || cfg.Emulator == nil || cfg.ResourceGroup == "" {
		return nil, errors.New("azuredp: Config needs NS, Emulator and ResourceGroup")
	}
	if cfg.ProbeScale == 0 {
		cfg.ProbeScale = 1
	}
	if cfg.ProbeScale < 0 {
		return nil, fmt.Errorf("azuredp: negative probe scale %g", cfg.ProbeScale)
	}
	if cfg.Propagation < 0 {
		return nil, fmt.Errorf("azuredp: negative propagation %s", cfg.Propagation)
	}
	if cfg.PoolFlows == "" {
		cfg.PoolFlows = PoolFlowsKeep
	}
	if !slices.Contains(PoolFlowOptions, cfg.PoolFlows) {
		return nil, fmt.Errorf("azuredp: pool flows %q: want %s", cfg.PoolFlows, strings.Join(PoolFlowOptions, " or "))
	}
	d := &DataPlane{
		cfg: cfg, ns: cfg.NS, done: make(chan struct{}),
		health: map[target]*health{}, queued: make(chan struct{}, 1), kicked: make(chan struct{}, 1),
		probers: map[target]*prober{}, marks: map[netip.Addr]uint32{},
		hops: map[uint32]netip.Addr{}, retired: map[netip.Addr]time.Time{}, maxIdle: defaultIdle,
		seed: rand.Uint32(), lo: cfg.NS.NewLoAddrs(),
	}
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
	if d.changed, err = d.ns.ChangeSysctls(sysctls); err != nil {
		return nil, fmt.Errorf("azuredp: %w", err)
	}
	if err := d.ns.NFT(ctx, setupScript()); err != nil {
		return nil, fmt.Errorf("azuredp: create tables: %w", err)
	}
	d.tables = true
	// Subscribe before reading what is stored, so that no write falls
	// between the two.
	d.unsubscribe = cfg.Emulator.Subscribe(d.onWrite)
	lbs, ipconfigs := d.snapshot()
	if err := d.apply(ctx, lbs, ipconfigs); err != nil {
		return nil, err
	}
	go d.loop()
	return d, nil
}

// snapshot copies the resource group's load balancers, and the compute
// side's ipconfig addresses when there is one.
func (d *DataPlane) snapshot() ([]*armnetwork.LoadBalancer, map[string]netip.Addr) {
	var out []*armnetwork.LoadBalancer
	for _, name := range d.cfg.Emulator.LoadBalancerNames(d.cfg.ResourceGroup) {
		if lb, ok := d.cfg.Emulator.LoadBalancer(d.cfg.ResourceGroup, name); ok {
			out = append(out, lb)
		}
	}
	var ipconfigs map[string]netip.Addr
	if d.cfg.Compute != nil {
		ipconfigs = d.cfg.Compute.IPConfigAddresses()
	}
	return out, ipconfigs
}

// onWrite runs inside the emulator's write, writes held: the copy is
// exactly what this write left.
func (d *DataPlane) onWrite() {
	c := change{due: time.Now().Add(d.cfg.Propagation)}
	c.lbs, c.ipconfigs = d.snapshot()
	d.mu.Lock()
	if len(d.pending) >= maxPending {
		d.pending[len(d.pending)-1] = c
	} else {
		d.pending = append(d.pending, c)
	}
	d.mu.Unlock()
	wake(d.queued)
}

// wake signals the loop on ch (queued or kicked), a channel of one slot,
// unless a signal waits there already.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop applies each change when it is due and re-programs on probe
// changes, until Close.
func (d *DataPlane) loop() {
	defer close(d.done)
	defer d.stopProbers()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var forget <-chan time.Time // PoolFlowsReset: conntrack.go
	if d.cfg.PoolFlows == PoolFlowsReset {
		t := time.NewTicker(forgetEvery)
		defer t.Stop()
		forget = t.C
	}
	retry := false
	for {
		d.mu.Lock()
		wait := time.Hour
		if len(d.pending) > 0 {
			wait = max(0, time.Until(d.pending[0].due))
		}
		d.mu.Unlock()
		if retry {
			wait = min(wait, time.Second)
		}
		timer.Reset(wait)
		reprogram := retry
		select {
		case <-d.ctx.Done():
			return
		case <-d.queued:
		case <-d.kicked:
			reprogram = true
		case <-timer.C:
		case <-forget:
			if err := d.forgetReset(); err != nil && d.ctx.Err() == nil {
				d.logf("%v (retrying)", err)
			}
			continue
		}
		var next *change
		d.mu.Lock()
		for len(d.pending) > 0 && !d.pending[0].due.After(time.Now()) {
			next = &d.pending[0]
			d.pending = d.pending[1:]
		}
		d.mu.Unlock()
		var err error
		switch {
		case next != nil:
			err = d.apply(d.ctx, next.lbs, next.ipconfigs)
		case reprogram:
			err = d.program(d.ctx)
		}
		if d.ctx.Err() != nil {
			return
		}
		retry = err != nil
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
		if err != nil {
			d.logf("azuredp: %v (retrying)", err)
		}
	}
}

// apply makes lbs the programmed state: probers for its targets, then the
// ruleset.
func (d *DataPlane) apply(ctx context.Context, lbs []*armnetwork.LoadBalancer, ipconfigs map[string]netip.Addr) error {
	m := buildModel(lbs, ipconfigs, d.cfg.ProbeScale)
	for _, s := range m.skipped {
		d.logf("azuredp: not programmed: %s", s)
	}
	d.syncProbers(m.targets())
	d.want = m
	return d.program(ctx)
}

// program renders the ruleset from the model to program and the probe
// states and applies it, with the frontend addresses; then Health reports
// it.
func (d *DataPlane) program(ctx context.Context) error {
	m := d.want
	d.mu.Lock()
	rs := ruleset{rules: m.rules, seed: d.seed, resetRemoved: d.cfg.PoolFlows == PoolFlowsReset}
	for _, r := range m.rules {
		rs.eligible = append(rs.eligible, m.eligible(r, func(t target) bool {
			h := d.health[t]
			return h != nil && h.up
		}))
	}
	d.mu.Unlock()
	if err := d.syncMarks(ctx, m); err != nil {
		return err
	}
	rs.marks, rs.nexthops = d.marks, d.hops
	if err := d.lo.Sync(ctx, m.frontends()); err != nil {
		return fmt.Errorf("azuredp: frontend addresses: %w", err)
	}
	script, made := render(rs, d.chains)
	if err := d.ns.NFT(ctx, script); err != nil {
		return fmt.Errorf("azuredp: program %d rules: %w", len(rs.rules), err)
	}
	d.chains = made
	elig := map[ruleKey][]netip.Addr{}
	for i, r := range rs.rules {
		elig[r.key()] = rs.eligible[i]
	}
	d.mu.Lock()
	d.view, d.elig = m, elig
	d.mu.Unlock()
	var parts []string
	for i, r := range rs.rules {
		parts = append(parts, fmt.Sprintf("%s/%s→%v", r.LB, r.Name, rs.eligible[i]))
	}
	d.logf("azuredp: programmed %s", strings.Join(parts, " "))
	return nil
}

// syncMarks gives every floating-IP backend address a mark and next hop.
// An address no rule uses any more keeps them for the longest idle timeout,
// so that its established flows still find their backend.
func (d *DataPlane) syncMarks(ctx context.Context, m model) error {
	now := time.Now()
	used := map[netip.Addr]bool{}
	for _, r := range m.rules {
		d.maxIdle = max(d.maxIdle, r.Idle)
		if !r.Floating {
			continue
		}
		for _, b := range r.Backends {
			used[b.Addr] = true
		}
	}
	for a, mark := range d.marks {
		if used[a] {
			delete(d.retired, a)
			continue
		}
		since, ok := d.retired[a]
		if !ok {
			d.retired[a] = now
		} else if now.Sub(since) > d.maxIdle {
			delete(d.marks, a)
			delete(d.hops, mark)
			delete(d.retired, a)
		}
	}
	for a := range used {
		if _, ok := d.marks[a]; ok {
			continue
		}
		if len(d.marks) >= maxMarks {
			return fmt.Errorf("azuredp: more than %d backend addresses", maxMarks)
		}
		hop, err := d.nextHop(ctx, a)
		if err != nil {
			return fmt.Errorf("azuredp: next hop: %w", err)
		}
		mark := d.freeMark()
		d.marks[a], d.hops[mark] = mark, hop
	}
	return nil
}

// freeMark is the lowest mark no address holds (marks start at 0x100:
// a packet's mark is 0 before the flows map names its backend).
func (d *DataPlane) freeMark() uint32 {
	for m := uint32(0x100); ; m++ {
		if _, taken := d.hops[m]; !taken {
			return m
		}
	}
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
	if d.unsubscribe != nil {
		d.unsubscribe()
	}
	d.cancel()
	<-d.done
	d.stopProbers() // probers started by a failed New's apply
	// A fresh context: the caller's may be what ended the run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if d.tables {
		// Both tables, and with them every chain, map and element.
		if err := d.ns.NFT(ctx, fmt.Sprintf("delete table netdev %[1]s\ndelete table ip %[1]s\n", table)); err != nil {
			errs = append(errs, err)
		} else {
			d.tables = false
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
