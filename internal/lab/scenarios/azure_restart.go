package scenarios

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// restart-idle on emulated Azure in the upstream mode: the writer is the
// real cloud-controller-manager, two processes of the lab's with their own
// leader election. The leader is the running process that called the load
// balancers last (only the leader's service controller does; the emulator
// records each call with its identity); a process the lab kills is replaced
// by a new one, as the kubelet would restart it.

// ccmProc is one cloud-controller-manager process of a run.
type ccmProc struct {
	name string
	proc *supervisor.Process
}

// startCCM starts one more cloud-controller-manager for the run.
func (r *run) startCCM() error {
	a, o := r.az, r.lab.opts.Azure
	name := fmt.Sprintf("ccm-%d", len(a.ccms)+1)
	p, err := ccm.Start(ccm.Config{
		Binary: o.CCMBinary, Dir: r.dir, Kubeconfig: a.kubeconfig,
		Emulator: a.served, Identity: name, Resources: ccmResources, LeaseNamespace: r.ns,
	}, name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	a.ccms = append(a.ccms, &ccmProc{name: name, proc: p})
	return nil
}

// ccmLeader is the running CCM that called a load balancer last at or after
// since, or nil.
func (r *run) ccmLeader(since time.Time) *ccmProc {
	calls, _ := r.az.emu.Calls(0)
	for i := len(calls) - 1; i >= 0 && !calls[i].Time.Before(since); i-- {
		if !strings.HasPrefix(calls[i].Kind, "loadBalancer") {
			continue
		}
		for _, c := range r.az.ccms {
			if c.name == calls[i].Client && !c.proc.Exited() {
				return c
			}
		}
	}
	return nil
}

// actRestartIdleCCM is actRestartIdle with the CCM as the writer: each
// restart kills the leader (SIGKILL and SIGTERM in turn), starts its
// replacement, and waits until another process leads (it read the load
// balancer) and idleVerify more. Every ARM write from one kill to the next
// (the last: to the end of the act) is that restart's.
func actRestartIdleCCM(ctx context.Context, r *run) error {
	var at []int64
	since := time.Time{}
	for i := range r.lab.opts.idleRestarts() {
		sig, name := syscall.SIGKILL, "SIGKILL"
		if i%2 == 1 {
			sig, name = syscall.SIGTERM, "SIGTERM"
		}
		var leader *ccmProc
		if err := traffic.WaitFor(ctx, 2*time.Minute, "a cloud-controller-manager leading", func() (bool, string) {
			leader = r.ccmLeader(since)
			return leader != nil, "no running cloud-controller-manager has read a load balancer"
		}); err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		at = append(at, r.azureWrites())
		r.mark("%s %s", name, leader.name)
		leader.proc.Signal(sig)
		select {
		case <-leader.proc.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := r.startCCM(); err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		since = time.Now()
		var next *ccmProc
		// A SIGKILLed leader's lease expires first (the CCM's default lease
		// duration, 15 s).
		if err := traffic.WaitFor(ctx, 2*time.Minute, "another cloud-controller-manager leading", func() (bool, string) {
			next = r.ccmLeader(since)
			return next != nil, "no other cloud-controller-manager has read a load balancer yet"
		}); err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		r.mark("leader %s", next.name)
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
	}
	at = append(at, r.azureWrites())
	r.restartWrites = writesBetween(at)
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}
