package azurewrites

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
)

// shared-lb: zerodrop beside the cloud-provider-azure CCM on one internal
// load balancer, as an AKS user would run zerodrop beside the managed CCM
// (a Standard load balancer cannot mix public and private frontends, so the
// shared one is the CCM's internal one, kubernetes-internal). The CCM writes
// its classless internal Services; zerodrop its own Services, given
// --azure-load-balancers kubernetes-internal, in zd- children it adds to the
// CCM's load balancer. Then rollouts of zerodrop's Services (every endpoint
// replaced), a restart of each writer's leader, and a new Service for each:
// per writer, its writes, 412s, Warning Events, and every child of the
// other writer one of its writes removed. Nothing may be lost: the run fails
// unless both writers' Services end up fully on the load balancer.

// ScenarioSharedLB is the scenario's name. It runs once, in zerodrop mode,
// with the CCM beside.
const ScenarioSharedLB = scenarios.ScenarioSharedLB

// sharedServices is how many Services each writer has at the start.
const sharedServices = 5

// setupShared starts the CCM with its Services, then zerodrop with its own
// on the CCM's load balancer, and waits until both are on it.
func (r *azureRun) setupShared(ctx context.Context) error {
	if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", r.ns, err)
	}
	for i := 0; i < sharedServices; i++ {
		if err := r.addCCMService(ctx, i); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		if err := r.startCCM(); err != nil {
			return err
		}
	}
	if err := r.wait(ctx, "the CCM's Services on its load balancer", func() string { return r.ccmConverged(ctx) }); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.zdLBs = []string{ccmLB}
	for i := 0; i < sharedServices; i++ {
		if err := r.addZerodropService(ctx, i); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := r.start(true); err != nil {
			return err
		}
	}
	if err := r.wait(ctx, "both writers' Services on one load balancer", r.sharedConverged(ctx)); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.settle(ctx)
	r.settleRecord(ctx)
	r.progress("%s: set up %d CCM and %d zerodrop Services on %s: %s", r.ns, len(r.ccmSvcs), len(r.svcs), ccmLB, r.layout())
	return nil
}

// addCCMService creates a classless internal Service for the CCM.
func (r *azureRun) addCCMService(ctx context.Context, i int) error {
	s := newAzureSvc(100+i, []string{ccmLB})
	s.name = fmt.Sprintf("ccm-svc-%02d", i)
	if r.opts.CCMLoadBalancers == CCMMultipleLBs {
		// With multiple standard load balancers the CCM spreads its
		// Services; pinned to the cluster's own configuration they all
		// land on ccmLB, the one zerodrop shares, as a user who runs
		// zerodrop beside it would pin them.
		s.ccmConfig = ccmConfigs[0]
	}
	if err := r.c.Create(ctx, s.ccmObject(r.ns)); err != nil {
		return fmt.Errorf("create service %s/%s: %w", r.ns, s.name, err)
	}
	r.ccmSvcs = append(r.ccmSvcs, s)
	return nil
}

// addZerodropService creates a zerodrop Service on the CCM's load balancer.
func (r *azureRun) addZerodropService(ctx context.Context, i int) error {
	s := newAzureSvc(i, []string{ccmLB})
	if err := s.create(ctx, r.c, r.ns, r.class()); err != nil {
		return err
	}
	r.svcs = append(r.svcs, s)
	return nil
}

// sharedConverged: zerodrop's Services hold what they ask for, and the
// CCM's Services all have their address and a rule per port.
func (r *azureRun) sharedConverged(ctx context.Context) func() string {
	return func() string {
		if msg := azureConverged(r.emu, azureGroup, r.ns, r.svcs); msg != "" {
			return "zerodrop: " + msg
		}
		lb, ok := r.emu.LoadBalancer(azureGroup, ccmLB)
		if !ok {
			return ccmLB + " does not exist"
		}
		ccmRules := 0
		for _, rule := range lb.Properties.LoadBalancingRules {
			if !strings.HasPrefix(*rule.Name, "zd-") {
				ccmRules++
			}
		}
		if ccmRules != len(r.ccmSvcs) {
			return fmt.Sprintf("the CCM's rules: %d, want %d", ccmRules, len(r.ccmSvcs))
		}
		var list corev1.ServiceList
		if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
			return err.Error()
		}
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return s.Name + " has no address"
			}
		}
		return ""
	}
}

// sharedLB runs the actions, each until both writers' Services are on the
// load balancer again: every endpoint of zerodrop's Services replaced, one
// at a time; zerodrop's leader restarted; the CCM's leader restarted; a new
// Service for each writer.
func (r *azureRun) sharedLB(ctx context.Context, a *report.AzureFigures) error {
	converged := r.sharedConverged(ctx)
	steps := []struct {
		name string
		do   func() error
	}{
		{"rollout of zerodrop's Services", func() error { return r.rolloutAll(ctx, a) }},
		{"zerodrop's leader restarted", func() error {
			leader := r.leader()
			if leader == nil {
				return fmt.Errorf("no zerodrop leader")
			}
			leader.stop()
			if _, err := r.start(true); err != nil {
				return err
			}
			return r.waitNewLeaderThen(ctx, leader, func() string { return "" })
		}},
		{"the CCM's leader restarted", func() error {
			_, err := r.restartCCMOnce(ctx, syscall.SIGTERM, nil, func() string { return r.addressed(ctx) })
			return err
		}},
		{"a new Service for each writer", func() error {
			if err := r.addCCMService(ctx, len(r.ccmSvcs)); err != nil {
				return err
			}
			return r.addZerodropService(ctx, len(r.svcs))
		}},
	}
	for _, st := range steps {
		t0 := time.Now()
		if err := st.do(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if err := r.wait(ctx, st.name+": both writers' Services on the load balancer", converged); err != nil {
			return err
		}
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Changes++
		r.settle(ctx)
		r.settleRecord(ctx)
		r.progress("%s: %s: converged in %.1fs", r.ns, st.name, time.Since(t0).Seconds())
	}
	return nil
}

// rolloutAll replaces every endpoint of zerodrop's Services, one a tick.
func (r *azureRun) rolloutAll(ctx context.Context, a *report.AzureFigures) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for round := 0; round < azureEndpoints; round++ {
		for _, s := range r.svcs {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			s.replaceOne()
			if err := s.pushEndpoints(ctx, r.c, r.ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// writerFigures splits a stretch of the record by writer (the CCM's
// identities are ccm-N) and finds each writer's removals of the other's
// children: zerodrop's are named zd-, the CCM's are not.
func writerFigures(calls []azurearm.Call) []report.WriterFigures {
	byWriter := map[string][]azurearm.Call{}
	for _, c := range calls {
		name := c.Client
		if strings.HasPrefix(name, "ccm-") {
			name = "upstream (cloud-provider-azure)"
		}
		byWriter[name] = append(byWriter[name], c)
	}
	var list []report.WriterFigures
	for name, mine := range byWriter {
		f := figuresOf(mine)
		w := report.WriterFigures{Writer: name, Writes: f.writes, PreconditionFailed: f.preconditionFailed,
			Conflicts: f.conflicts, Superseded: f.superseded}
		for _, c := range mine {
			if c.Kind != "loadBalancer" || c.Method != http.MethodPut && c.Method != http.MethodDelete {
				continue // a pool's write removes addresses, not another writer's children
			}
			owned := func(child string) bool { return strings.HasPrefix(child, "zd-") == (c.Client == zerodropIdentity) }
			for _, ch := range c.Changes {
				if child, ok := removedChild(ch); ok && !owned(child) {
					w.RemovedOthers = append(w.RemovedOthers, child)
				}
			}
		}
		list = append(list, w)
	}
	return list
}

// removedChild is the load-balancer child a Changes line of a load
// balancer's write removes whole: "- properties.<collection>[<name>].name = …".
func removedChild(line string) (string, bool) {
	if !strings.HasPrefix(line, "- properties.") {
		return "", false
	}
	path := changePath(line)
	open, close := strings.IndexByte(path, '['), strings.IndexByte(path, ']')
	if open < 0 || close < open || path[close+1:] != ".name" {
		return "", false
	}
	switch path[len("properties."):open] {
	case "frontendIPConfigurations", "backendAddressPools", "loadBalancingRules", "probes":
		return path[open+1 : close], true
	}
	return "", false
}

// sharedWarnings counts the Warning Events of each writer's Services.
func (r *azureRun) sharedWarnings(ctx context.Context, figures []report.WriterFigures) error {
	var list corev1.EventList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return fmt.Errorf("list Events: %w", err)
	}
	for i := range figures {
		ccm := strings.HasPrefix(figures[i].Writer, "upstream")
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.InvolvedObject.Name, "ccm-svc-") == ccm {
				figures[i].WarningEvents += int64(max(e.Count, 1))
			}
		}
	}
	return nil
}
