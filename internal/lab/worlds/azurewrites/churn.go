package azurewrites

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// churn on the emulator: cloud-provider-azure #9839, where the local-service
// backend-pool updater and the reconcile loop wrote one load balancer at
// once (409s, superseded operations, Warning Events). The run's Services are
// node-backed, half of them Local with their endpoints on two of the three
// nodes. For ChurnDuration the lab moves a Local Service's endpoints to
// other nodes every churnEndpointTick (the nodes with an endpoint change:
// cloud-provider-azure's updater rewrites the Service's own pool with
// multiple standard load balancers; zerodrop drains the node left without
// one), and every churnServiceTick in turn creates a Service, moves one to
// the other load balancer, and adds or removes a Service's second port.
// Per writer: its writes, 412s, 409s, superseded operations, Warning Events
// and error log lines (the writer's processes' klog lines of severity E);
// then what the load balancers hold. zerodrop's run fails unless they
// converge to what the Services ask for; the CCM's is reported as measured:
// the Local Services whose pool disagrees with their endpoints' nodes.
//
// With one load balancer (--azure-ccm-lbs single) the CCM's Services have
// nowhere to move (one internal load balancer) and share the nodes' pool,
// so endpoint changes call for no write; a move there adds or removes the
// second port instead.

// ScenarioChurn is the scenario's name.
const ScenarioChurn = "churn"

const (
	// churnServices is churn's Service count at the start.
	churnServices     = 30
	churnEndpointTick = 50 * time.Millisecond
	churnServiceTick  = 500 * time.Millisecond
	// churnCCMLimit bounds the wait for the CCM to converge after the
	// churn: what it has not done by then is reported, not waited for.
	churnCCMLimit = 90 * time.Second
)

// churnServicesOf returns churn's Services: restart-idle's.
func churnServicesOf(n int) []*azureSvc { return idleServicesOf(n) }

// churn changes the cluster for ChurnDuration, then waits for the load
// balancers and measures each writer.
func (r *azureRun) churn(ctx context.Context, a *report.AzureFigures) error {
	logs := r.writerLogSizes()
	var local []*azureSvc
	for _, s := range r.svcs {
		if s.local {
			local = append(local, s)
		}
	}
	endpointTick, serviceTick := time.NewTicker(churnEndpointTick), time.NewTicker(churnServiceTick)
	defer endpointTick.Stop()
	defer serviceTick.Stop()
	end := time.After(r.opts.ChurnDuration)
	for e, s := 0, 0; ; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			return r.afterChurn(ctx, a, logs)
		case <-endpointTick.C:
			svc := local[e%len(local)]
			svc.shift++
			for range svc.endpoints {
				svc.replaceOne()
			}
			if err := svc.pushEndpoints(ctx, r.c, r.ns); err != nil {
				return err
			}
			e++
		case <-serviceTick.C:
			if err := r.changeService(ctx, s); err != nil {
				return err
			}
			s++
		}
		a.Changes++
	}
}

// changeService makes the n-th Service change of the churn: a new Service,
// a move to the other load balancer, or the second port added or removed,
// in turn.
func (r *azureRun) changeService(ctx context.Context, n int) error {
	svc := r.svcs[(n/3)%len(r.svcs)]
	switch n % 3 {
	case 0:
		s := nodeBackedSvc(len(r.svcs))
		r.svcs = append(r.svcs, s)
		return s.createAs(ctx, r.c, r.objectOf(s))
	case 1:
		switch {
		case !r.upstream():
			svc.lb = otherLB(svc.lb, r.lbNames())
		case r.opts.CCMLoadBalancers == CCMMultipleLBs:
			cur, err := r.ccmConfigOf(ctx, svc)
			if err != nil {
				return err
			}
			svc.ccmConfig = otherLB(cur, ccmConfigs)
		default:
			svc.https = !svc.https // one load balancer: nowhere to move
		}
	default:
		svc.https = !svc.https
	}
	return pushSpec(ctx, r.c, r.objectOf(svc))
}

// objectOf is the Service s as the run's writer has it: the CCM's
// (upstream) or zerodrop's.
func (r *azureRun) objectOf(s *azureSvc) *corev1.Service {
	if r.upstream() {
		return s.ccmObject(r.ns)
	}
	return s.object(r.ns, r.class())
}

// ccmConfigs are the CCM's load balancer configurations with multiple
// standard load balancers (ccmCloudConfig); each one's internal load
// balancer is named with -internal.
var ccmConfigs = []string{"kubernetes", "kubernetes-2"}

// ccmConfigOf is the configuration whose load balancer holds the CCM's
// Service s, "" if none does yet: the one with its frontend, which the CCM
// names after the Service's UID (k8s.io/cloud-provider's
// DefaultLoadBalancerName: "a" and the UID without dashes, at most 32
// characters).
func (r *azureRun) ccmConfigOf(ctx context.Context, s *azureSvc) (string, error) {
	var svc corev1.Service
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: s.name}, &svc); err != nil {
		return "", fmt.Errorf("get service %s/%s: %w", r.ns, s.name, err)
	}
	prefix := "a" + strings.ReplaceAll(string(svc.UID), "-", "")
	prefix = prefix[:min(len(prefix), 32)]
	for _, config := range ccmConfigs {
		lb, ok := r.emu.LoadBalancer(azureGroup, config+"-internal")
		if !ok {
			continue
		}
		for _, fe := range lb.Properties.FrontendIPConfigurations {
			if strings.HasPrefix(strings.ToLower(ptr.Deref(fe.Name, "")), prefix) {
				return config, nil
			}
		}
	}
	return "", nil
}

// ccmMisplaced counts the CCM's Services that asked to move and are not
// on the load balancer they asked for.
func (r *azureRun) ccmMisplaced(ctx context.Context) (int, error) {
	n := 0
	for _, s := range r.svcs {
		if s.ccmConfig == "" {
			continue
		}
		cur, err := r.ccmConfigOf(ctx, s)
		if err != nil {
			return 0, err
		}
		if cur != s.ccmConfig {
			n++
		}
	}
	return n, nil
}

// otherLB is the load balancer of lbs after cur (the first when cur is
// none of them).
func otherLB(cur string, lbs []string) string {
	return lbs[(slices.Index(lbs, cur)+1)%len(lbs)]
}

// afterChurn waits for the load balancers (zerodrop: until they hold what
// the Services ask for, or the run fails; the CCM: at most churnCCMLimit)
// and records each writer's figures.
func (r *azureRun) afterChurn(ctx context.Context, a *report.AzureFigures, logs map[string]int64) error {
	t1 := time.Now()
	if r.upstream() {
		limit := time.Now().Add(churnCCMLimit)
		for r.ccmChurnConverged(ctx) != "" && time.Now().Before(limit) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		a.ConvergeSeconds = time.Since(t1).Seconds()
		r.settleRecord(ctx)
		a.StaleLocalPools = r.staleLocalPools()
		var err error
		if a.Misplaced, err = r.ccmMisplaced(ctx); err != nil {
			return err
		}
		if msg := r.ccmChurnConverged(ctx); msg != "" {
			r.progress("%s: not converged %s after the churn: %s", r.ns, churnCCMLimit, msg)
		}
	} else {
		if err := r.wait(ctx, "the load balancers to converge after the churn", r.nodeBackedConverged); err != nil {
			return fmt.Errorf("after churn: %w", err)
		}
		a.ConvergeSeconds = time.Since(t1).Seconds()
		r.settle(ctx)
		r.settleRecord(ctx)
	}
	var lines []string
	a.ErrorLogLines, lines = r.errorLogLines(logs)
	for _, l := range lines {
		r.progress("%s: error log line: %s", r.ns, l)
	}
	return nil
}

// nodeBackedConverged compares zerodrop's load balancers with what the
// node-backed Services ask for: each port's rule on the Service's load
// balancer only, its pool every node, in service (admin state None) where
// the Service has an endpoint or is Cluster, draining (Down) elsewhere.
func (r *azureRun) nodeBackedConverged() string {
	docs := map[string]*armnetwork.LoadBalancer{}
	for _, name := range r.lbNames() {
		lb, ok := r.emu.LoadBalancer(azureGroup, name)
		if !ok {
			return "load balancer " + name + " does not exist"
		}
		docs[name] = lb
	}
	for _, s := range r.svcs {
		local := s.endpointNodeIPs()
		var want []string
		for _, n := range labNodes {
			state := armnetwork.LoadBalancerBackendAddressAdminStateNone
			if s.local && !local[n.ip] {
				state = armnetwork.LoadBalancerBackendAddressAdminStateDown
			}
			want = append(want, n.ip+"="+string(state))
		}
		for name, lb := range docs {
			for _, port := range []int32{80, 443} {
				rule := ruleName(r.ns, s, port)
				if name != s.lb || !slices.Contains(s.ports(), port) {
					if findRule(lb, rule) != nil {
						return rule + " still on " + name
					}
					continue
				}
				rl, problem := checkRule(lb, rule, s)
				if problem != "" {
					return problem + " on " + name
				}
				var have []string
				for _, addr := range poolAddresses(lb, lastSegment(rl.Properties.BackendAddressPool.ID)) {
					have = append(have, addr[0]+"="+addr[1])
				}
				slices.Sort(have)
				if !slices.Equal(have, want) {
					return fmt.Sprintf("%s has %v, want %v", rule, have, want)
				}
			}
		}
	}
	return ""
}

// ccmChurnConverged says what the CCM has still to do after the churn:
// what ccmConverged finds, or a Local Service's pool (multiple load
// balancers) that disagrees with its endpoints' nodes; "" when nothing.
func (r *azureRun) ccmChurnConverged(ctx context.Context) string {
	if msg := r.ccmConverged(ctx); msg != "" {
		return msg
	}
	if n := r.staleLocalPools(); n > 0 {
		return fmt.Sprintf("%d Local Services' pools disagree with their endpoints' nodes", n)
	}
	if n, err := r.ccmMisplaced(ctx); err != nil || n > 0 {
		return fmt.Sprintf("%d Services not on the load balancer they ask for (%v)", n, err)
	}
	return ""
}

// staleLocalPools counts the CCM's Local Services whose own pool (multiple
// standard load balancers: the pool named after the Service, on whichever
// load balancer holds it) is missing or does not hold exactly the addresses
// of the nodes with an endpoint. With one load balancer Local Services share
// the nodes' pool: 0.
func (r *azureRun) staleLocalPools() int {
	if r.opts.CCMLoadBalancers != CCMMultipleLBs {
		return 0
	}
	pools := map[string][]string{}
	for _, name := range r.emu.LoadBalancerNames(azureGroup) {
		lb, _ := r.emu.LoadBalancer(azureGroup, name)
		for _, p := range lb.Properties.BackendAddressPools {
			var ips []string
			for _, addr := range poolAddresses(lb, ptr.Deref(p.Name, "")) {
				ips = append(ips, addr[0])
			}
			slices.Sort(ips)
			pools[strings.ToLower(ptr.Deref(p.Name, ""))] = ips
		}
	}
	stale := 0
	for _, s := range r.svcs {
		if !s.local {
			continue
		}
		var want []string
		for ip := range s.endpointNodeIPs() {
			want = append(want, ip)
		}
		slices.Sort(want)
		// cloud-provider-azure's getLocalServiceBackendPoolName.
		have, ok := pools[strings.ToLower(r.ns+"-"+s.name)]
		if !ok || !slices.Equal(have, want) {
			stale++
		}
	}
	return stale
}

// writerLogSizes is where each writer process's log ends now: the error
// lines counted are those written after.
func (r *azureRun) writerLogSizes() map[string]int64 {
	out := map[string]int64{}
	for _, path := range r.writerLogs() {
		if fi, err := os.Stat(path); err == nil {
			out[path] = fi.Size()
		}
	}
	return out
}

// writerLogs are the logs of the run's writer processes: zerodrop's
// controllers, or the CCMs.
func (r *azureRun) writerLogs() []string {
	var out []string
	for _, in := range r.instances {
		if in.proc != nil {
			out = append(out, in.proc.log)
		}
	}
	for _, c := range r.ccms {
		out = append(out, c.log)
	}
	return out
}

// errorLogLines counts the klog lines of severity E (`E1127 …`) the writers
// logged after from, and returns the first few (maxShownErrorLines), each cut to 300 bytes, so
// that a run that has them says what they were.
func (r *azureRun) errorLogLines(from map[string]int64) (int, []string) {
	n := 0
	var shown []string
	for _, path := range r.writerLogs() {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(from[path], 0); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64*1024), 1024*1024)
			for sc.Scan() {
				if isKlogError(sc.Text()) {
					n++
					if len(shown) < maxShownErrorLines {
						shown = append(shown, truncateLine(sc.Text(), 300))
					}
				}
			}
		}
		_ = f.Close()
	}
	return n, shown
}

const maxShownErrorLines = 5

func truncateLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// isKlogError reports whether line is a klog line of severity E:
// "E" then the month and day, a space and the time.
func isKlogError(line string) bool {
	if len(line) < 6 || line[0] != 'E' || line[5] != ' ' {
		return false
	}
	for _, c := range line[1:5] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
