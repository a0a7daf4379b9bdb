package azure

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// In the upstream, recipe and gates modes the writer is the real
// cloud-controller-manager, two processes of the world's with their own
// leader election. The leader is the running process that called the load
// balancers last (only the leader's service controller does; the emulator
// records each call with its identity); a process restart-idle kills is
// replaced by a new one, as the kubelet would restart it.

// ccmSet are a run's CCM processes, and since when restart-idle looks for
// a leader.
type ccmSet struct {
	procs []*ccmProc
	since time.Time
}

// ccmProc is one cloud-controller-manager process of a run.
type ccmProc struct {
	name string
	proc *supervisor.Process
}

var _ world.WriterRestarter = (*run)(nil)

// startCCM starts one more cloud-controller-manager for the run.
func (a *run) startCCM() error {
	name := fmt.Sprintf("ccm-%d", len(a.ccm.procs)+1)
	p, err := ccm.Start(ccm.Config{
		Binary: a.w.opts.CCMBinary, Dir: a.env.Dir, Kubeconfig: a.kubeconfig,
		Emulator: a.served, Identity: name, Resources: ccmResources, LeaseNamespace: a.env.NS,
		Extra: ccm.ConfigExtra(a.w.opts.CCMConfig, ccmCloudConfig(a.w.opts.CCMLoadBalancers)),
	}, name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	a.ccm.procs = append(a.ccm.procs, &ccmProc{name: name, proc: p})
	return nil
}

// leader is the running CCM that called a load balancer last at or after
// since, or nil.
func (a *run) leader(since time.Time) *ccmProc {
	calls, _ := a.emu.Calls(0)
	for i := len(calls) - 1; i >= 0 && !calls[i].Time.Before(since); i-- {
		if !strings.HasPrefix(calls[i].Kind, "loadBalancer") {
			continue
		}
		for _, c := range a.ccm.procs {
			if c.name == calls[i].Client && !c.proc.Exited() {
				return c
			}
		}
	}
	return nil
}

// RestartsWriter: the CCM is the writer restart-idle restarts in the modes
// that run it.
func (a *run) RestartsWriter() bool { return a.env.Mode.NodeBacked() }

// RestartWriter kills the leading CCM with sig, starts its replacement,
// and waits until another process leads (it read the load balancer).
func (a *run) RestartWriter(ctx context.Context, sig syscall.Signal, atKill func(leader string)) error {
	var leader *ccmProc
	if err := traffic.WaitFor(ctx, 2*time.Minute, "a cloud-controller-manager leading", func() (bool, string) {
		leader = a.leader(a.ccm.since)
		return leader != nil, "no running cloud-controller-manager has read a load balancer"
	}); err != nil {
		return err
	}
	atKill(leader.name)
	leader.proc.Signal(sig)
	select {
	case <-leader.proc.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := a.DuringOutage(ctx, len(a.act.stops)-1); err != nil {
		return err
	}
	if err := a.startCCM(); err != nil {
		return err
	}
	a.ccm.since = time.Now()
	var next *ccmProc
	// A SIGKILLed leader's lease expires first (the CCM's default lease
	// duration, 15 s).
	if err := traffic.WaitFor(ctx, 2*time.Minute, "another cloud-controller-manager leading", func() (bool, string) {
		next = a.leader(a.ccm.since)
		return next != nil, "no other cloud-controller-manager has read a load balancer yet"
	}); err != nil {
		return err
	}
	a.env.Mark("leader %s", next.name)
	return nil
}

// The CCM's load-balancer layouts (Options.CCMLoadBalancers).
const (
	CCMSingleLB    = "single"
	CCMMultipleLBs = "multiple"
)

// CCMLayouts are the layouts, the default first.
var CCMLayouts = []string{CCMSingleLB, CCMMultipleLBs}

// ccmCloudConfig is what the layout adds to the CCM's cloud config:
// multipleStandardLoadBalancerConfigurations with the cluster's load
// balancer and a second, each the primary of one availability set (the
// CCM places a node by its VM's availability set,
// pkg/provider/azure_standard.go).
func ccmCloudConfig(layout string) map[string]any {
	if layout != CCMMultipleLBs {
		return nil
	}
	return map[string]any{"multipleStandardLoadBalancerConfigurations": []map[string]any{
		{"name": "kubernetes", "primaryVMSet": "as-1"},
		{"name": "kubernetes-2", "primaryVMSet": "as-2"},
	}}
}

// seedLayout gives each node a virtual machine in an availability set
// (the first two nodes as-1, the others as-2) where the layout places
// nodes by them.
func (a *run) seedLayout() {
	if a.w.opts.CCMLoadBalancers != CCMMultipleLBs {
		return
	}
	for _, n := range a.env.Net.Net.Nodes {
		a.emu.SeedVirtualMachine(azSub, azGroup, cluster.NodeName(n.Index), availabilitySet(CCMMultipleLBs, n.Index))
	}
}
