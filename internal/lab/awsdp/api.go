package awsdp

import (
	"context"
	"errors"
	"net/netip"
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
	// a packet (default DefaultIdleTimeout). It is the kernel's clock,
	// whatever the emulator's.
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
	// a probe's result.
	Logf func(format string, args ...any)
}

// DefaultIdleTimeout is an NLB's TCP idle timeout: 350 s by default (NLB
// docs, "Connection idle timeout"; a client or target that sends data
// after it gets a TCP reset).
const DefaultIdleTimeout = 350 * time.Second

// DataPlane is a programmed namespace. Its methods are safe for concurrent
// use.
type DataPlane struct{}

// New programs cfg.NS from the NLBs stored now and follows the emulator
// until Close. On error everything made is already removed.
func New(ctx context.Context, cfg Config) (*DataPlane, error) {
	return nil, errors.New("awsdp: not implemented yet")
}

// Frontend is the address given to the NLB whose DNS name is dnsName;
// false until the data plane has seen that NLB.
func (d *DataPlane) Frontend(dnsName string) (netip.Addr, bool) { return netip.Addr{}, false }

// Target is one target of a listener as the data plane has programmed it.
type Target struct {
	ID   string         // the instance ID
	Addr netip.AddrPort // where its connections go
	// State is the target's state as the data plane sees it: the
	// emulator's, the propagation time ago.
	State awsapi.State
	// Receiving: new connections go to it. Reset: its established
	// connections are answered with a reset.
	Receiving, Reset bool
}

// ErrUnknownListener: no listener takes that frontend address and port in
// the programmed state.
var ErrUnknownListener = errors.New("awsdp: no such listener programmed")

// Targets is the programmed view of the listener on frontend:port.
func (d *DataPlane) Targets(frontend netip.Addr, port uint16) ([]Target, error) {
	return nil, ErrUnknownListener
}

// Err is the last programming's error (nil once one succeeds again).
func (d *DataPlane) Err() error { return nil }

// Close stops following the emulator, stops every probe and removes every
// table, address and sysctl change the data plane made. Idempotent.
func (d *DataPlane) Close() error { return nil }

// Probes holds the health check results the data plane measured, and
// answers the emulator's checks from them. Make it before the emulator
// (its Options.Probe is Check) and give it to the data plane.
type Probes struct{}

// NewProbes returns an empty record whose results are stamped with now,
// the emulator's clock (nil: time.Now).
func NewProbes(now func() time.Time) *Probes { return &Probes{} }

// Check answers the emulator's health check scheduled at `at` with the
// result of the last probe of that address, port, protocol and path
// started at or before it; a failure when there is none (nothing probed
// yet: as a check that timed out). It takes no emulator lock: the
// emulator calls it holding its own.
func (p *Probes) Check(req awsapi.ProbeRequest, at time.Time) awsapi.CheckResult {
	return awsapi.CheckResult{}
}
