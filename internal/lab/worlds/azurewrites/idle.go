package azurewrites

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// restart-idle on the emulator: cloud-provider-azure #10224, where six
// leader changes of the cloud-controller-manager, each a full sync, cut
// WebSockets for hours with externalTrafficPolicy Local. Nothing changes in
// the cluster; the writer (the leader) is stopped AzureOptions.IdleRestarts times,
// SIGKILL and SIGTERM in turn (a crash keeps the lease until it expires, a
// rollout releases it or not, as the writer does), and a replacement
// started. Its Services are node-backed, half Local and half Cluster, as in
// the incident: zerodrop's in node mode on its two load balancers, the
// CCM's on its one with nodeIP pools. Per restart the lab reports the writes
// from the emulator's record and what they changed: backend addresses
// removed, probes and rules changed.

// ScenarioRestartIdle is the scenario's name.
const ScenarioRestartIdle = "restart-idle"

// idleServices is restart-idle's Service count.
const idleServices = 30

// idleServicesOf returns restart-idle's (and churn's) Services: even ones
// Local, with their endpoints on two of the three nodes, so that one node
// has none (the CCM's Local pool leaves it out with multiple load
// balancers; zerodrop keeps it draining) and moving the endpoints
// (endpoints-move, churn) changes which.
func idleServicesOf(n int) []*azureSvc {
	var out []*azureSvc
	for i := 0; i < n; i++ {
		out = append(out, nodeBackedSvc(i))
	}
	return out
}

// nodeBackedSvc is the i-th of idleServicesOf.
func nodeBackedSvc(i int) *azureSvc {
	s := newAzureSvc(i, azureLBNames)
	s.nodeMode, s.local = true, i%2 == 0
	if s.local {
		s.endpoints = s.endpoints[:2]
	}
	return s
}

// setupNodeBacked creates restart-idle's or churn's node-backed Services
// and starts two zerodrop controller processes, then waits until every
// Service has its address and the controllers are quiet.
func (r *azureRun) setupNodeBacked(ctx context.Context, svcs []*azureSvc) error {
	if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", r.ns, err)
	}
	r.svcs = svcs
	for _, s := range r.svcs {
		if err := s.create(ctx, r.c, r.ns, r.class()); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := r.start(true); err != nil {
			return err
		}
	}
	if err := r.wait(ctx, "every Service to have its address", func() string { return r.addressed(ctx) }); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.settle(ctx)
	r.settleRecord(ctx)
	r.progress("%s: set up %d node-backed Services (half Local) on %v", r.ns, len(r.svcs), azureLBNames)
	return nil
}

// addressed says which Service of the run has no load-balancer address
// yet; "" when all have one.
func (r *azureRun) addressed(ctx context.Context) string {
	var list corev1.ServiceList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return err.Error()
	}
	if len(list.Items) < len(r.svcs) {
		return fmt.Sprintf("%d of %d Services listed", len(list.Items), len(r.svcs))
	}
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return s.Name + " has no address"
		}
	}
	return ""
}

// restartIdle stops the leader AzureOptions.IdleRestarts times and measures each restart
// until a new leader has verified everything and the writers are quiet.
func (r *azureRun) restartIdle(ctx context.Context, a *report.AzureFigures, res *report.Result) error {
	for i := 0; i < r.opts.IdleRestarts; i++ {
		_, mark := r.emu.Calls(0)
		t0 := time.Now()
		sig, name := world.IdleStop(i)
		var err error
		during := func() error { return r.duringOutage(ctx, i) }
		if r.upstream() {
			_, err = r.restartCCMOnce(ctx, sig, during, func() string { return r.addressed(ctx) })
		} else {
			err = r.restartZerodropOnce(ctx, sig, during, func() string { return r.addressed(ctx) })
		}
		if err != nil {
			return fmt.Errorf("restart %d (%s): %w", i+1, name, err)
		}
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		r.settle(ctx)
		r.settleRecord(ctx)
		calls, _ := r.emu.Calls(mark)
		f, d := figuresOf(calls), diffsOf(calls)
		res.WritesPerRestart = append(res.WritesPerRestart, int64(f.writes))
		a.Stops = append(a.Stops, name)
		a.ChangedPerRestart = append(a.ChangedPerRestart, f.changed)
		a.RemovedBackendsPerRestart = append(a.RemovedBackendsPerRestart, d.removedBackends)
		a.ProbeRuleChangesPerRestart = append(a.ProbeRuleChangesPerRestart, d.probeOrRule)
		r.progress("%s: restart %d (%s): %d writes, %d changed something: %d backend addresses removed, %d probe or rule changes",
			r.ns, i+1, name, f.writes, f.changed, d.removedBackends, d.probeOrRule)
	}
	return nil
}

// restartZerodropOnce stops the leading zerodrop process with sig (SIGTERM:
// a graceful stop), calls during (if any) while no writer leads, starts a
// replacement and waits until another one leads and has verified every
// load balancer, and then says "" (the state the run must reach).
func (r *azureRun) restartZerodropOnce(ctx context.Context, sig syscall.Signal, during func() error, then func() string) error {
	leader := r.leader()
	if leader == nil {
		return errors.New("no leader to restart")
	}
	if sig == syscall.SIGKILL {
		leader.kill()
	} else {
		leader.stop()
	}
	if during != nil {
		if err := during(); err != nil {
			return err
		}
	}
	if _, err := r.start(true); err != nil {
		return err
	}
	return r.waitNewLeaderThen(ctx, leader, then)
}

// restartCCMOnce stops the leading CCM with sig, calls during (if any)
// while the standby has not taken over yet, starts a replacement and waits
// until a new leader has reported every Service synced and then says ""
// (the state the run must reach); it returns the stopped one's name.
func (r *azureRun) restartCCMOnce(ctx context.Context, sig syscall.Signal, during func() error, then func() string) (string, error) {
	leader := r.ccmLeader()
	if leader == nil {
		return "", errors.New("no cloud-controller-manager has called ARM: no leader to restart")
	}
	ensured, err := r.ensuredCounts(ctx)
	if err != nil {
		return "", err
	}
	if sig == syscall.SIGKILL {
		leader.proc.Kill()
		<-leader.proc.Done()
	} else {
		_ = leader.proc.Stop()
	}
	r.dropCCM(leader)
	if during != nil {
		if err := during(); err != nil {
			return leader.name, err
		}
	}
	if err := r.startCCM(); err != nil {
		return leader.name, err
	}
	return leader.name, r.wait(ctx, "a new leader syncs every Service", func() string {
		now, err := r.ensuredCounts(ctx)
		if err != nil {
			return err.Error()
		}
		for _, s := range r.ccmServices() {
			if now[s.name] <= ensured[s.name] {
				return s.name + " not synced by a new leader yet"
			}
		}
		return then()
	})
}

// ccmServices are the Services the CCM writes: the run's, or shared-lb's
// CCM Services.
func (r *azureRun) ccmServices() []*azureSvc {
	if len(r.ccmSvcs) > 0 {
		return r.ccmSvcs
	}
	return r.svcs
}

// What restart-idle changes while the writer is down (--azure-idle-change):
// configurations of the #10224 search that differ right after a restart.
const (
	IdleChangeNone = "none"
	// IdleChangeNodeJoins: a node joins the cluster at each restart (its
	// VM in the next availability set).
	IdleChangeNodeJoins = "node-joins"
	// IdleChangeEndpointsMove: every Local Service's endpoints move to
	// other nodes at each restart.
	IdleChangeEndpointsMove = "endpoints-move"
)

// IdleChanges are the --azure-idle-change values.
var IdleChanges = []string{IdleChangeNone, IdleChangeNodeJoins, IdleChangeEndpointsMove}

// duringOutage makes restart i's change (opts.IdleChange) while no writer
// leads.
func (r *azureRun) duringOutage(ctx context.Context, i int) error {
	switch r.opts.IdleChange {
	case IdleChangeNodeJoins:
		n := labNode{name: fmt.Sprintf("lab-node-%d", len(labNodes)+1+i), ip: fmt.Sprintf("10.30.0.%d", len(labNodes)+1+i),
			availabilitySet: []string{"as-1", "as-2"}[i%2]}
		r.emu.SeedVirtualMachine(azureSub, azureGroup, n.name, n.availabilitySet)
		r.joined = append(r.joined, n.name)
		return createNode(ctx, r.c, n)
	case IdleChangeEndpointsMove:
		for _, s := range r.svcs {
			if !s.local {
				continue
			}
			s.shift++
			for range s.endpoints {
				s.replaceOne()
			}
			if err := s.pushEndpoints(ctx, r.c, r.ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeJoined deletes the nodes restart-idle added: the next run starts
// with labNodes only.
func (r *azureRun) removeJoined(ctx context.Context) {
	for _, name := range r.joined {
		_ = r.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
}

// writeDiffs summarises what writes changed: backend addresses removed
// (an address that served no longer in its pool) and changes to a probe or
// a load-balancing rule.
type writeDiffs struct{ removedBackends, probeOrRule int }

func diffsOf(calls []azurearm.Call) writeDiffs {
	var d writeDiffs
	for _, c := range calls {
		if !c.Write() {
			continue
		}
		removed := map[string]bool{}
		for _, ch := range c.Changes {
			path := changePath(ch)
			if strings.HasPrefix(ch, "- ") && strings.Contains(path, "loadBalancerBackendAddresses[") && strings.HasSuffix(path, ".properties.ipAddress") {
				removed[path] = true
			}
			if c.Kind == "loadBalancer" && (strings.HasPrefix(path, "properties.probes[") || strings.HasPrefix(path, "properties.loadBalancingRules[")) {
				d.probeOrRule++
			}
		}
		d.removedBackends += len(removed)
	}
	return d
}

// changePath is the path of a Call.Changes line.
func changePath(line string) string {
	p := line[2:]
	if i := strings.IndexAny(p, " :"); i >= 0 {
		p = p[:i]
	}
	return p
}
