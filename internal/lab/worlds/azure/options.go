// Package azure is the lab's world of emulated Azure with traffic
// (`zerodrop lab --provider azure-emulator` with a traffic scenario): each
// run gets an ARM emulator of its own, served over HTTPS on the root
// namespace's loopback, and the load-balancer host programmed from it by
// azuredp, which forwards packets as Azure's Standard Load Balancer does.
// The writer is the real cloud-controller-manager of cloud-provider-azure
// in the upstream and recipe modes (two processes with its own leader
// election; beside zerodrop's gates in gates mode), and in zerodrop mode
// zerodrop's controller pods with the Azure provider (`zerodrop lab
// azure-controller`: the command's wiring with the emulator's endpoint and
// credential), reaching the emulator through a forwarder on each node's
// loopback. ARM's write latency, the data plane's further propagation and
// the rule-health operation's lag are the world's Options.
package azure

import (
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/azuredp"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Options are the world's variants: its clocks and the CCM it runs.
type Options struct {
	// ARMLatency is how long a write's long-running operation takes
	// (the emulator's WriteLatency): a GET shows provisioningState
	// Updating until then.
	ARMLatency time.Duration
	// LBPropagation is how long after that the data plane applies the
	// change (no client can observe it).
	LBPropagation time.Duration
	// HealthLag is how old the rule-health operation's answer is.
	HealthLag time.Duration
	// CCMBinary is cloud-provider-azure's cloud-controller-manager
	// (default: built or taken from the cache).
	CCMBinary string
	// Services are the run's other Services beside the workload's
	// (services.go): node-backed, half of them Local, without traffic.
	Services int
	// FaultRate is the share of ARM requests (polls aside) the emulator
	// fails during the act: 412s, 429s, 500s and slow answers in equal
	// shares, none twice in a row on one load balancer.
	FaultRate float64
	// CCMLoadBalancers is the CCM's load-balancer layout: CCMSingleLB
	// (default) or CCMMultipleLBs.
	CCMLoadBalancers string
	// SharedLB runs zerodrop mode's controllers beside the CCM, on the
	// CCM's internal load balancer (--azure-load-balancers
	// kubernetes-internal), as beside AKS's managed CCM; the other
	// Services are then the CCM's (shared.go).
	SharedLB bool
	// IdleChange is what restart-idle changes while the writer is down
	// (IdleChanges; default IdleChangeNone).
	IdleChange string
	// CCMConfig is the CCM's configuration (ccm.Configs): ccm.ConfigNodeIP
	// (default: pools of node IPs, no compute side), or ccm.ConfigVMSS and
	// ccm.ConfigStandard, whose NIC-based pools hold the nodes' machines
	// (compute.go).
	CCMConfig string
	// PoolFlows is what the data plane does with an established flow whose
	// address leaves a pool (azuredp.PoolFlowOptions; default keep).
	PoolFlows string
	// CCMVersion is the release of cloud-provider-azure whose CCM writes
	// (ccm.BinaryVersion; "" is ccm.DefaultVersion).
	CCMVersion string
}

// Clock is the options' clocks as the report names them (no grace period:
// that is the run's).
func (o Options) Clock() report.AzureClock {
	return report.AzureClock{ARMLatencySeconds: o.ARMLatency.Seconds(), LBPropagationSeconds: o.LBPropagation.Seconds(),
		HealthLagSeconds: o.HealthLag.Seconds()}
}

// DefaultARMLatency is --arm-latency's default: an ARM load-balancer PUT
// takes about 5–12 s (cloud-provider-azure #5909; azure-libraries-for-net
// #1021), docs/azure.md.
const DefaultARMLatency = 10 * time.Second

// World is emulated Azure with traffic, at one point of the options.
type World struct{ opts Options }

// New is the world with opts.
func New(opts Options) *World { return &World{opts: opts} }

var _ world.World = (*World)(nil)

// Name names the world.
func (w *World) Name() string { return "emulated Azure with traffic" }

// Options are the world's options.
func (w *World) Options() Options { return w.opts }

// Clock is what the report records of a run's clocks: the options' and
// the workload's grace period, with what the bound promises there.
func (w *World) Clock(mode report.Mode, grace time.Duration) *report.AzureClock {
	c := w.opts.Clock()
	c.GraceSeconds = grace.Seconds()
	c.Promise = report.PromiseAt(mode, c)
	return &c
}

// SteadyTimeout: on emulated Azure each replaced pod waits for about four
// writes to take effect (its address added, the old one drained, then
// removed at the drain timeout, which the lab leaves at its default) and
// for a probe interval or two.
func (a *run) SteadyTimeout(n int32) time.Duration {
	o := a.w.opts
	return time.Duration(n) * (4*(o.ARMLatency+o.LBPropagation) + o.HealthLag + drainTimeout)
}

// ccmResources are a run's Azure resources, as its CCMs' cloud config
// names them.
var ccmResources = ccm.Resources{SubscriptionID: azSub, ResourceGroup: azGroup, Location: azLocation,
	VNet: azVNet, Subnet: azSubnetName, SecurityGroup: azNSG}

var _ world.Variant = (*World)(nil)

// Variant is the world's clocks (a sweep's first point) and its other
// options.
func (w *World) Variant() string {
	o := w.opts
	layout, change := o.CCMLoadBalancers, o.IdleChange
	if layout == "" {
		layout = CCMSingleLB
	}
	if change == "" {
		change = IdleChangeNone
	}
	v := fmt.Sprintf("%s, other Services %d, ARM fault rate %g, CCM load balancers %s, shared load balancer %t, change while the writer is down %s",
		o.Clock(), o.Services, o.FaultRate, layout, o.SharedLB, change)
	// The newer options are named only off their defaults, so that the
	// variants (and the plans naming them) of every earlier run stand.
	if o.CCMConfig != "" && o.CCMConfig != ccm.ConfigNodeIP {
		v += ", CCM configuration " + o.CCMConfig
	}
	if o.PoolFlows != "" && o.PoolFlows != azuredp.PoolFlowsKeep {
		v += ", established flows of an address that leaves a pool " + o.PoolFlows
	}
	if o.CCMVersion != "" && o.CCMVersion != ccm.DefaultVersion {
		v += ", CCM release " + o.CCMVersion
	}
	return v
}
