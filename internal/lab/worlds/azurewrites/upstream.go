package azurewrites

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The emulator lab's upstream is the real cloud-controller-manager of
// cloud-provider-azure (internal/lab/ccm): two processes with its own
// leader election (a Lease in the run's namespace, its default timings),
// --controllers service-lb-controller, pointed at the run's emulator over
// HTTPS. It writes what cloud-provider-azure writes for the same Services
// without a loadBalancerClass, made internal (frontends from the subnet, as
// zerodrop's): one load balancer, kubernetes-internal, whose pool holds the
// cluster's nodes (nodeIP pools). Its figures come from the emulator's record
// of the calls its identities made.

// ccmLB and ccmPool are the load balancer and pool cloud-provider-azure
// uses for internal Services of the cluster "kubernetes".
const ccmLB, ccmPool = "kubernetes-internal", "kubernetes"

// labNodes are the cluster's nodes for the CCM's pools: Ready, never
// renewed (the lab runs no node lifecycle controller), shared by the runs.
// Their VMs (multiple load balancers only) are in two availability sets.
var labNodes = []labNode{
	{"lab-node-1", "10.30.0.1", "as-1"}, {"lab-node-2", "10.30.0.2", "as-1"}, {"lab-node-3", "10.30.0.3", "as-2"},
}

type labNode struct{ name, ip, availabilitySet string }

// Upstream's load-balancer layouts (--azure-ccm-lbs).
const (
	CCMSingleLB    = "single"
	CCMMultipleLBs = "multiple"
)

// ccmCloudConfig is what the layout adds to the CCM's cloud config:
// multipleStandardLoadBalancerConfigurations with the cluster's load
// balancer and a second, each the primary of one availability set (the
// CCM places a node by its VM's availability set, pkg/provider/azure_standard.go).
func ccmCloudConfig(layout string) map[string]any {
	if layout != CCMMultipleLBs {
		return nil
	}
	return map[string]any{"multipleStandardLoadBalancerConfigurations": []map[string]any{
		{"name": "kubernetes", "primaryVMSet": "as-1"},
		{"name": "kubernetes-2", "primaryVMSet": "as-2"},
	}}
}

// ensureNodes creates labNodes once per control plane.
func ensureNodes(ctx context.Context, c client.Client) error {
	for _, n := range labNodes {
		if err := createNode(ctx, c, n); err != nil {
			return err
		}
	}
	return nil
}

// createNode creates a Ready node with its internal address, unless it
// exists.
func createNode(ctx context.Context, c client.Client, n labNode) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
	if err := c.Create(ctx, node); apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("create node %s: %w", n.name, err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}, {Type: corev1.NodeHostName, Address: n.name}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now}}}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("node %s status: %w", n.name, err)
	}
	return nil
}

// ccmInstance is one cloud-controller-manager process.
type ccmInstance struct {
	name, log string
	proc      *supervisor.Process
}

func (r *azureRun) upstream() bool { return r.mode == "upstream" }

// setupUpstream creates the run's Services for the CCM (restart-idle's:
// half of them Local), starts two CCM processes and waits until the load
// balancer holds every Service.
func (r *azureRun) setupUpstream(ctx context.Context, scenario string) error {
	if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", r.ns, err)
	}
	svcs := make([]*azureSvc, 0, r.opts.Services)
	for i := 0; i < r.opts.Services; i++ {
		svcs = append(svcs, newAzureSvc(i, azureLBNames))
	}
	switch scenario {
	case ScenarioRestartIdle:
		svcs = idleServicesOf(r.opts.IdleServices)
	case ScenarioChurn:
		svcs = churnServicesOf(r.opts.ChurnServices)
	}
	for _, s := range svcs {
		if err := s.createAs(ctx, r.c, s.ccmObject(r.ns)); err != nil {
			return err
		}
		r.svcs = append(r.svcs, s)
	}
	for i := 0; i < 2; i++ {
		if err := r.startCCM(); err != nil {
			return err
		}
	}
	if err := r.wait(ctx, "the load balancer to converge", func() string { return r.ccmConverged(ctx) }); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	r.settleRecord(ctx)
	r.progress("%s: set up %d Services (cloud-provider-azure, %s load balancer layout): %s", r.ns, len(r.svcs),
		r.opts.CCMLoadBalancers, r.layout())
	return nil
}

func (r *azureRun) startCCM() error {
	r.ccmSeq++
	name := fmt.Sprintf("ccm-%d", r.ccmSeq)
	p, err := ccm.Start(ccm.Config{
		Binary: r.opts.CCMBinary, Dir: r.procs.dir, Kubeconfig: r.procs.kubeconfig,
		Emulator: r.procs.served, Identity: name, Resources: ccmResources, LeaseNamespace: r.ns,
		Extra: ccmCloudConfig(r.opts.CCMLoadBalancers),
	}, name)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	r.ccms = append(r.ccms, &ccmInstance{name: name, log: ccm.LogPath(r.procs.dir, name), proc: p})
	return nil
}

// ccmConverged says what still differs from every Service having its
// address and a rule per port on the load balancer, whose pool holds the
// nodes; "" when nothing does.
func (r *azureRun) ccmConverged(ctx context.Context) string {
	var list corev1.ServiceList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return err.Error()
	}
	ports := 0
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return s.Name + " has no address"
		}
		ports += len(s.Spec.Ports)
	}
	if r.opts.CCMLoadBalancers == CCMMultipleLBs {
		return "" // Services and nodes spread over the load balancers as the CCM places them
	}
	lb, ok := r.emu.LoadBalancer(azureGroup, ccmLB)
	if !ok {
		return "load balancer " + ccmLB + " does not exist"
	}
	if n := len(lb.Properties.LoadBalancingRules); n != ports {
		return fmt.Sprintf("%s has %d rules, want %d", ccmLB, n, ports)
	}
	var have, want []string
	for _, a := range poolAddresses(lb, ccmPool) {
		have = append(have, a[0])
	}
	for _, n := range labNodes {
		want = append(want, n.ip)
	}
	slices.Sort(have)
	if !slices.Equal(have, want) {
		return fmt.Sprintf("pool %s has %v, want the nodes %v", ccmPool, have, want)
	}
	return ""
}

// restartUpstream stops the CCM that leads Restarts times (SIGTERM,
// as a rollout or a node drain does) and starts a replacement, with
// nothing changing in the cluster: every write the new leader makes is one
// a restart should not make.
func (r *azureRun) restartUpstream(ctx context.Context, a *report.AzureFigures, res *report.Result) error {
	for i := 0; i < r.opts.Restarts; i++ {
		_, mark := r.emu.Calls(0)
		t0 := time.Now()
		stopped, err := r.restartCCMOnce(ctx, syscall.SIGTERM, nil, func() string { return r.ccmConverged(ctx) })
		if err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		a.ConvergeSeconds = max(a.ConvergeSeconds, time.Since(t0).Seconds())
		a.Restarts++
		r.settleRecord(ctx)
		calls, _ := r.emu.Calls(mark)
		f := figuresOf(calls)
		res.WritesPerRestart = append(res.WritesPerRestart, int64(f.writes))
		r.progress("%s: restart %d: %s stopped; %d writes (%d changed something)", r.ns, i+1, stopped, f.writes, f.changed)
	}
	return nil
}

// layout says which load balancers hold how many rules and pool addresses.
func (r *azureRun) layout() string {
	var parts []string
	for _, name := range r.emu.LoadBalancerNames(azureGroup) {
		lb, _ := r.emu.LoadBalancer(azureGroup, name)
		addrs := 0
		for _, p := range lb.Properties.BackendAddressPools {
			if p.Properties != nil {
				addrs += len(p.Properties.LoadBalancerBackendAddresses)
			}
		}
		parts = append(parts, fmt.Sprintf("%s (%d rules, %d pools, %d pool addresses)", name,
			len(lb.Properties.LoadBalancingRules), len(lb.Properties.BackendAddressPools), addrs))
	}
	return strings.Join(parts, ", ")
}

// dropCCM forgets a CCM that was stopped.
func (r *azureRun) dropCCM(c *ccmInstance) {
	r.ccms = slices.DeleteFunc(r.ccms, func(x *ccmInstance) bool { return x == c })
}

// ccmLeader is the running CCM that called the load balancers last: only
// the leader's service controller does.
func (r *azureRun) ccmLeader() *ccmInstance {
	calls, _ := r.emu.Calls(0)
	for i := len(calls) - 1; i >= 0; i-- {
		if !strings.HasPrefix(calls[i].Kind, "loadBalancer") {
			continue
		}
		for _, c := range r.ccms {
			if c.name == calls[i].Client && !c.proc.Exited() {
				return c
			}
		}
	}
	return nil
}

// ensuredCounts counts, per Service of the run, the syncs the service
// controller reported finished (EnsuredLoadBalancer Events, each
// occurrence of a series).
func (r *azureRun) ensuredCounts(ctx context.Context) (map[string]int32, error) {
	var list corev1.EventList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return nil, fmt.Errorf("list Events: %w", err)
	}
	out := map[string]int32{}
	for _, e := range list.Items {
		if e.Reason == "EnsuredLoadBalancer" {
			out[e.InvolvedObject.Name] += max(e.Count, 1)
		}
	}
	return out, nil
}

// settleRecord waits until the emulator has recorded no call for
// azureIdle, at most settleLimit.
func (r *azureRun) settleRecord(ctx context.Context) {
	_, last := r.emu.Calls(0)
	since, end := time.Now(), time.Now().Add(settleLimit)
	for time.Since(since) < azureIdle && ctx.Err() == nil && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
		if _, n := r.emu.Calls(0); n != last {
			last, since = n, time.Now()
		}
	}
}

// stopUpstream stops the CCMs, then removes the run's Services (and the
// finalizer the CCM put on them) so that a later run's CCM, which watches
// every namespace, does not take them up.
func (r *azureRun) stopUpstream(ctx context.Context) {
	for _, c := range r.ccms {
		_ = c.proc.Stop()
	}
	for _, s := range append(r.svcs, r.ccmSvcs...) {
		key := client.ObjectKey{Namespace: r.ns, Name: s.name}
		var svc corev1.Service
		if err := r.c.Get(ctx, key, &svc); err != nil {
			continue
		}
		_ = r.c.Delete(ctx, &svc)
		if err := r.c.Get(ctx, key, &svc); err == nil && len(svc.Finalizers) > 0 {
			svc.Finalizers = nil
			_ = r.c.Update(ctx, &svc)
		}
	}
}

// recordFigures are the writes and reads in a stretch of the emulator's
// record.
type recordFigures struct {
	lbPuts, poolPuts, deletes, writes, changed, gets, preconditionFailed int
	// conflicts are 409 answers; superseded the writes whose operation a
	// later write to the same load balancer superseded.
	conflicts, superseded int
}

func figuresOf(calls []azurearm.Call) recordFigures {
	var f recordFigures
	for _, c := range calls {
		switch {
		case c.Superseded():
			f.superseded++
			continue
		case c.Method == http.MethodGet:
			f.gets++
		case c.Status == http.StatusPreconditionFailed:
			f.preconditionFailed++
		case c.Status == http.StatusConflict:
			f.conflicts++
		}
		if c.Method != http.MethodPut && c.Method != http.MethodDelete {
			continue
		}
		f.writes++
		switch {
		case c.Method == http.MethodDelete:
			f.deletes++
		case c.Kind == "loadBalancer":
			f.lbPuts++
		case c.Kind == "backendAddressPool":
			f.poolPuts++
		}
		if len(c.Changes) > 0 {
			f.changed++
		}
	}
	return f
}
