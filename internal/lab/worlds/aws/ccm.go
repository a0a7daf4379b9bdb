package aws

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The writer is the real aws-cloud-controller-manager, two processes of
// the world's with their own leader election (a Lease in the run's
// namespace). The emulator's record does not say who called, so the
// leader is told by its log: client-go's leader election logs
// "successfully acquired lease" once it leads, and a process that stops
// leading exits. A process restart-idle kills is replaced by a new one,
// as the kubelet would restart it.

// ccmProc is one CCM process of a run.
type ccmProc struct {
	name string
	proc *supervisor.Process
}

// leaseAcquired is what client-go's leader election logs once the process
// leads (leaderelection.go: "Successfully acquired lease" in structured
// logs, "successfully acquired lease" in older releases' printf ones).
const leaseAcquired = "successfully acquired lease"

// startCCM starts one more CCM for the run.
func (a *run) startCCM() error {
	name := fmt.Sprintf("aws-ccm-%d", len(a.ccm)+1)
	p, err := ccm.StartAWS(ccm.AWSConfig{Binary: a.w.opts.CCMBinary, Dir: a.env.Dir, Kubeconfig: a.kubeconfig,
		Emulator: a.served, Region: awsapi.DefaultRegion, Zone: zone, VPC: vpcID, Subnet: subnetID,
		ClusterID: clusterID, IMDS: a.imds.url(), LeaseNamespace: a.env.NS}, name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	a.ccm = append(a.ccm, &ccmProc{name: name, proc: p})
	return nil
}

// logHas reports whether the process's log has a line containing s, in
// any case.
func (a *run) logHas(c *ccmProc, s string) bool {
	return logContains(ccm.LogPath(a.env.Dir, c.name), s)
}

// logContains reports whether the file at path contains s, in any case.
func logContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(strings.ToLower(string(b)), strings.ToLower(s))
}

// leader is the running CCM that leads, or nil.
func (a *run) leader() *ccmProc {
	for _, c := range a.ccm {
		if !c.proc.Exited() && a.logHas(c, leaseAcquired) {
			return c
		}
	}
	return nil
}

var _ world.WriterRestarter = (*run)(nil)

// RestartsWriter: the CCM is the writer restart-idle restarts.
func (a *run) RestartsWriter() bool { return true }

// RestartWriter kills the leading CCM with sig, starts its replacement,
// and waits until another process leads and has synced the workload's
// Service (a new leader syncs every Service once: the informer's adds),
// then until the record is quiet.
func (a *run) RestartWriter(ctx context.Context, sig syscall.Signal, atKill func(leader string)) error {
	var leader *ccmProc
	if err := traffic.WaitFor(ctx, 2*time.Minute, "an aws-cloud-controller-manager leading", func() (bool, string) {
		leader = a.leader()
		return leader != nil, "no running aws-cloud-controller-manager has acquired the lease"
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
	if err := a.startCCM(); err != nil {
		return err
	}
	// A stopped leader does not release its Lease (k8s.io/cloud-provider
	// sets no ReleaseOnCancel): its successor waits the lease duration
	// (15 s) out.
	var next *ccmProc
	synced := "Ensuring load balancer for service " + a.svc.String()
	if err := traffic.WaitFor(ctx, 2*time.Minute, "another aws-cloud-controller-manager leading and synced", func() (bool, string) {
		next = a.leader()
		if next == nil {
			return false, "no other aws-cloud-controller-manager has acquired the lease yet"
		}
		return a.logHas(next, synced), next.name + " leads and has not synced " + a.svc.String() + " yet"
	}); err != nil {
		return err
	}
	settleRecord(ctx, a.emu)
	a.env.Mark("leader %s", next.name)
	return nil
}
