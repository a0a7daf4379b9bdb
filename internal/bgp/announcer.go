package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Candidate is an address the node may announce: a Service's address and
// the ports its listeners serve it on.
type Candidate struct {
	Address netip.Addr
	Ports   []uint16
}

// CandidateSource says which addresses the node may announce. The
// controller implements it from the Services; StaticCandidates is a fixed
// list.
type CandidateSource interface {
	Candidates(ctx context.Context) ([]Candidate, error)
}

// StaticCandidates is a fixed list of candidates.
type StaticCandidates []Candidate

// Candidates returns the list.
func (s StaticCandidates) Candidates(context.Context) ([]Candidate, error) { return s, nil }

// Rules are the hysteresis of the local checks, as HAProxy's rise and fall.
type Rules struct {
	// RiseCount is how many consecutive successful checks announce an
	// address that is not announced; 0 means 1.
	RiseCount int
	// FallCount is how many consecutive failed checks withdraw an announced
	// address; 0 means 3 (one refused connection during an HAProxy reload
	// must not move every flow to the other nodes).
	FallCount int
}

func (r Rules) withDefaults() Rules {
	if r.RiseCount <= 0 {
		r.RiseCount = 1
	}
	if r.FallCount <= 0 {
		r.FallCount = 3
	}
	return r
}

// Check is what the local checks of one address have said so far.
type Check struct {
	Successes int // consecutive successful checks (0 after a failure)
	Failures  int // consecutive failed checks (0 after a success)
	// Announced is the last decision, which stands while neither count has
	// reached its rule.
	Announced bool
}

// Record folds one check's result into c.
func (c Check) Record(ok bool) Check {
	if ok {
		c.Successes++
		c.Failures = 0
	} else {
		c.Failures++
		c.Successes = 0
	}
	return c
}

// Decide is the set of addresses to announce: each IPv4 candidate whose
// checks reached RiseCount successes, or that is announced and has not yet
// failed FallCount times in a row; nothing while the node is leaving. A
// candidate never checked is not announced. (IPv6 candidates are left out:
// the speaker announces IPv4 only.)
func Decide(rules Rules, candidates []Candidate, checks map[netip.Addr]Check, leaving bool) []netip.Prefix {
	if leaving {
		return nil
	}
	r := rules.withDefaults()
	var desired []netip.Prefix
	for _, cand := range candidates {
		a := cand.Address
		if !a.Is4() {
			continue
		}
		c, ok := checks[a]
		if !ok {
			continue
		}
		if c.Successes >= r.RiseCount || (c.Announced && c.Failures < r.FallCount) {
			desired = append(desired, netip.PrefixFrom(a, 32))
		}
	}
	slices.SortFunc(desired, netip.Prefix.Compare)
	return slices.Compact(desired)
}

// Checker verifies that the node serves a candidate; nil means it does.
type Checker interface {
	Check(ctx context.Context, c Candidate) error
}

// ErrNotLocal is a check's failure for an address no interface of the node
// has: a connection to it would leave the node and might be answered by
// another node, so it says nothing about this one.
var ErrNotLocal = errors.New("address is not on this node")

// LocalDial is the default check: the address is on one of the node's
// interfaces (the speaker's own link, AddressLink, or lo where the node's
// configuration put it), and a TCP connection to it on one of its ports
// succeeds. A connection to a local address never leaves the node's
// network namespace, so the check needs neither the API server nor the
// router; it is accepted by the kernel's listen queue, so it fails when no
// listener is open (HAProxy stopped or its listener closed), not when
// HAProxy is slow to accept.
type LocalDial struct {
	// Timeout bounds one check, all ports together.
	Timeout time.Duration
	// interfaceAddrs lists the node's addresses; nil means
	// net.InterfaceAddrs. A test counts the listings.
	interfaceAddrs func() ([]net.Addr, error)
}

// roundChecker is a Checker with work that all of one round's checks share:
// checkAll asks it once a round for the checker of that round.
type roundChecker interface {
	Checker
	forRound() Checker
}

// Check implements Checker: it lists the node's addresses for this one
// check. The Announcer lists them once a round (forRound).
func (d LocalDial) Check(ctx context.Context, c Candidate) error {
	return d.forRound().Check(ctx, c)
}

// forRound lists the node's addresses once for a round's checks. Listed
// once a candidate, a node with thousands of Service addresses dumped all
// of its interfaces' addresses thousands of times a round.
func (d LocalDial) forRound() Checker {
	list := d.interfaceAddrs
	if list == nil {
		list = net.InterfaceAddrs
	}
	local, err := localAddrs(list)
	return localRound{dial: d, local: local, err: err}
}

// localRound is LocalDial for one round: the node's addresses as listed at
// its start.
type localRound struct {
	dial  LocalDial
	local map[netip.Addr]bool
	// err is the listing's failure, every check's of the round: which
	// addresses are the node's is not known.
	err error
}

func (r localRound) Check(ctx context.Context, c Candidate) error {
	if r.err != nil {
		return r.err
	}
	if !r.local[c.Address] {
		return ErrNotLocal
	}
	if len(c.Ports) == 0 {
		return errors.New("no ports to check")
	}
	ctx, cancel := context.WithTimeout(ctx, r.dial.Timeout)
	defer cancel()
	var errs []error
	for _, p := range c.Ports {
		var dialer net.Dialer
		conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(c.Address.String(), strconv.Itoa(int(p))))
		if err == nil {
			conn.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// localAddrs is the set of the node's addresses; an IPv4 address listed in
// its 16-byte form counts as IPv4.
func localAddrs(list func() ([]net.Addr, error)) (map[netip.Addr]bool, error) {
	addrs, err := list()
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	local := make(map[netip.Addr]bool, len(addrs))
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				local[ip.Unmap()] = true
			}
		}
	}
	return local, nil
}

// Setter is what the announcer drives: the Speaker.
type Setter interface {
	Set(desired []netip.Prefix) error
}

// Hooks are the announcer's observations, for metrics; any may be nil. They
// are called from the announcer's goroutines and must not block.
type Hooks struct {
	// Checked is one check's result.
	Checked func(c Candidate, err error, took time.Duration)
	// Decided is each round's decision, after the speaker took it (err nil)
	// or refused it.
	Decided func(desired []netip.Prefix, leaving bool, err error)
	// CandidatesFailed is a failure to read the candidates (the last list
	// is kept).
	CandidatesFailed func(err error)
	// PlaceFailed is a failure to place the addresses (Placer); the round
	// goes on, and an address not on the node is not announced.
	PlaceFailed func(err error)
}

// AnnouncerConfig is an Announcer's configuration.
type AnnouncerConfig struct {
	Speaker    Setter
	Candidates CandidateSource
	// Leaving says whether the node is leaving (NodeWatcher.Leaving); nil
	// means never.
	Leaving func() bool
	// Checker verifies each candidate; nil means LocalDial with
	// CheckTimeout.
	Checker Checker
	// Placer, when set, puts the candidates' addresses on the node before
	// each round's checks (AddressLink); nil: the node's own configuration
	// does. The checks still decide: an address placed but not served is
	// not announced.
	Placer Placer
	// Interval is the time between two rounds of checks; 0 means 1 s.
	Interval time.Duration
	// CheckTimeout bounds one candidate's check; 0 means half the
	// interval. At most the interval, so a round never overruns the next.
	CheckTimeout time.Duration
	Rules        Rules
	Hooks        Hooks
	Logger       *slog.Logger
}

// Announcer checks the candidates every interval and has the speaker
// announce what Decide says. Use it from one goroutine: Step, then Run.
type Announcer struct {
	cfg        AnnouncerConfig
	log        *slog.Logger
	candidates []Candidate
	checks     map[netip.Addr]Check
	leaving    bool
	// listed: the candidates were read once. Until then nothing is placed,
	// so a start without the Services never removes an address.
	listed bool
	// placeErr is the last placement's failure, logged when it changes.
	placeErr string
}

// NewAnnouncer returns an announcer for cfg.
func NewAnnouncer(cfg AnnouncerConfig) (*Announcer, error) {
	if cfg.Speaker == nil || cfg.Candidates == nil {
		return nil, errors.New("announcer: a speaker and a candidate source are required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = cfg.Interval / 2
	}
	if cfg.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("announcer: interval %s is under 10ms", cfg.Interval)
	}
	if cfg.CheckTimeout < 0 || cfg.CheckTimeout > cfg.Interval {
		return nil, fmt.Errorf("announcer: check timeout %s is outside 0..interval (%s)", cfg.CheckTimeout, cfg.Interval)
	}
	if cfg.Checker == nil {
		cfg.Checker = LocalDial{Timeout: cfg.CheckTimeout}
	}
	if cfg.Leaving == nil {
		cfg.Leaving = func() bool { return false }
	}
	cfg.Rules = cfg.Rules.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Announcer{cfg: cfg, log: log.With("logger", "announcer"), checks: map[netip.Addr]Check{}}, nil
}

// Run calls Step every interval until ctx ends. A round that fails (the
// speaker refused the set) is logged and the next one tries again.
func (a *Announcer) Run(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := a.Step(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("announce", "err", err)
		}
	}
}

// Step is one round: read the candidates (keeping the last list when that
// fails: the source's outage is not the node's), place their addresses
// (Placer), check each one, decide and hand the decision to the speaker.
// Called before the speaker's Start, it records the first set, which a
// graceful-restart successor must announce before its End-of-RIB.
func (a *Announcer) Step(ctx context.Context) error {
	cands, err := a.cfg.Candidates.Candidates(ctx)
	if err != nil {
		if a.cfg.Hooks.CandidatesFailed != nil {
			a.cfg.Hooks.CandidatesFailed(err)
		}
		a.log.Warn("read the candidates; keeping the last list", "err", err, "candidates", len(a.candidates))
	} else {
		a.candidates, a.listed = cands, true
	}
	a.place(ctx)
	results := a.checkAll(ctx, a.candidates)
	next := make(map[netip.Addr]Check, len(results))
	for addr, err := range results {
		prev := a.checks[addr]
		c := prev.Record(err == nil)
		if err != nil && c.Failures == 1 {
			a.log.Info("check failed", "address", addr, "err", err)
		} else if err == nil && prev.Failures > 0 {
			a.log.Info("check passed", "address", addr, "after", prev.Failures)
		}
		next[addr] = c
	}
	leaving := a.cfg.Leaving()
	if leaving != a.leaving {
		a.log.Info("node leaving changed", "leaving", leaving)
		a.leaving = leaving
	}
	desired := Decide(a.cfg.Rules, a.candidates, next, leaving)
	err = a.cfg.Speaker.Set(desired)
	if a.cfg.Hooks.Decided != nil {
		a.cfg.Hooks.Decided(desired, leaving, err)
	}
	if err != nil {
		// Keep the counts, not the decision: the next round decides again.
		for addr, c := range next {
			c.Announced = a.checks[addr].Announced
			next[addr] = c
		}
		a.checks = next
		return fmt.Errorf("set the announced addresses: %w", err)
	}
	for addr, c := range next {
		c.Announced = slices.Contains(desired, netip.PrefixFrom(addr, 32))
		next[addr] = c
	}
	a.checks = next
	return nil
}

// place has the Placer keep the candidates' addresses and those still
// announced on the node, once the candidates were read.
func (a *Announcer) place(ctx context.Context) {
	if a.cfg.Placer == nil || !a.listed {
		return
	}
	err := a.cfg.Placer.Place(ctx, placeWanted(a.candidates, a.checks))
	if err != nil && a.cfg.Hooks.PlaceFailed != nil {
		a.cfg.Hooks.PlaceFailed(err)
	}
	switch {
	case err != nil && err.Error() != a.placeErr:
		a.log.Error("place the addresses", "err", err)
		a.placeErr = err.Error()
	case err == nil && a.placeErr != "":
		a.log.Info("addresses placed again")
		a.placeErr = ""
	}
}

// checkAll checks every candidate at once (each bounded by the check
// timeout) and returns each address's result; an address listed twice is
// checked once, on all its ports. What the checks share is done once for
// the round (LocalDial lists the node's addresses), not once an address.
func (a *Announcer) checkAll(ctx context.Context, cands []Candidate) map[netip.Addr]error {
	merged := map[netip.Addr]Candidate{}
	for _, c := range cands {
		m := merged[c.Address]
		m.Address = c.Address
		m.Ports = append(m.Ports, c.Ports...)
		merged[c.Address] = m
	}
	checker := a.cfg.Checker
	if r, ok := checker.(roundChecker); ok {
		checker = r.forRound()
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = make(map[netip.Addr]error, len(merged))
		sem     = make(chan struct{}, 64) // dials in flight
	)
	for _, c := range merged {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			cctx, cancel := context.WithTimeout(ctx, a.cfg.CheckTimeout)
			err := checker.Check(cctx, c)
			cancel()
			if a.cfg.Hooks.Checked != nil {
				a.cfg.Hooks.Checked(c, err, time.Since(start))
			}
			mu.Lock()
			results[c.Address] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return results
}
