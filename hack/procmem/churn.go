package main

// The churn phases (-churn), after the restart, on the restarted process:
// endpoint churn replaces one endpoint of a fraction of the Services as a
// rollout does (a new Pod Ready at a new address, in the EndpointSlice in
// the old one's place, the old Pod deleted); Service churn deletes as many
// Services (with their EndpointSlices and Pods) and creates as many new
// ones. Each phase is done when the controller has applied it: in a role
// with an HAProxy, its servers (endpoint churn) or frontends (Service
// churn) are there, and, for the control role, the changed Services were
// reconciled (endpoint churn) or the new Services have their address and
// the deleted ones are gone (Service churn).

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

var churnFlag = flag.Float64("churn", 0.1, "fraction of the Services each churn phase after the restart changes: endpoint churn replaces one endpoint of each (a new Pod at a new address, then the old one out of the EndpointSlice and deleted, as a rollout does), Service churn deletes as many Services and creates as many new ones; 0: no churn phases")

// replacementBase is the endpoint index of the first replacement: its
// address (198.19.128.1) and the next are apart from every Service's first
// endpoints (firstEndpoints: indices below it).
const replacementBase = 96000

// cluster is what the churn phases change: the Services that exist and
// their endpoints.
type cluster struct {
	c   client.Client
	eps *liveEndpoints // nil: nothing listens
	// held are the Services HAProxy refuses (-refused): their new
	// endpoints are never served, and not waited for.
	held map[int]bool
	mu   sync.Mutex
	// current are the endpoints of the Services whose endpoints changed
	// (firstEndpoints otherwise).
	current         map[int][]int
	nextService     int
	nextReplacement int
}

func newCluster(c client.Client, eps *liveEndpoints, held map[int]bool) *cluster {
	return &cluster{c: c, eps: eps, held: held, current: map[int][]int{},
		// Past the old-workers phase's Services (-n to -n+-reloads).
		nextService: *services + *reloadsFlag + 1, nextReplacement: replacementBase}
}

// churned is how many Services a churn phase changes: -churn of -n, at
// least one.
func churned() int {
	return max(1, int(math.Round(*churnFlag*float64(*services))))
}

// spread is m of the first -n Services, evenly apart, from the offset-th
// of each stride on.
func spread(m int, offset float64) []int {
	out := make([]int, m)
	for j := range out {
		out[j] = min(*services-1, int((float64(j)+offset)*float64(*services)/float64(m)))
	}
	return out
}

func (cl *cluster) endpointsOf(i int) []int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if ks, ok := cl.current[i]; ok {
		return ks
	}
	return firstEndpoints(i)
}

// replaceEndpoint replaces Service i's first endpoint by a new one and
// returns the new one's index.
func (cl *cluster) replaceEndpoint(ctx context.Context, i int) (int, error) {
	ks := cl.endpointsOf(i)
	cl.mu.Lock()
	k := cl.nextReplacement
	cl.nextReplacement++
	cl.mu.Unlock()
	if k >= 128000 {
		return 0, fmt.Errorf("no endpoint address left for a replacement (%d)", k)
	}
	if err := cl.eps.listen(k); err != nil {
		return 0, err
	}
	var pod *corev1.Pod
	if *podsFlag {
		var err error
		if pod, err = createEndpointPod(ctx, cl.c, i, k); err != nil {
			return 0, err
		}
	}
	var s discoveryv1.EndpointSlice
	if err := cl.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(i)}, &s); err != nil {
		return 0, fmt.Errorf("EndpointSlice %s: %w", name(i), err)
	}
	old := endpointIP(ks[0])
	for j, ep := range s.Endpoints {
		if len(ep.Addresses) > 0 && ep.Addresses[0] == old {
			s.Endpoints[j] = endpointOf(k, pod)
		}
	}
	if err := cl.c.Update(ctx, &s); err != nil {
		return 0, fmt.Errorf("EndpointSlice %s: %w", name(i), err)
	}
	if err := deletePod(ctx, cl.c, i, ks[0]); err != nil {
		return 0, err
	}
	cl.mu.Lock()
	cl.current[i] = append([]int{k}, ks[1:]...)
	cl.mu.Unlock()
	return k, nil
}

// endpointChurn runs the endpoint churn phase on the process p and returns
// how long until it was applied.
func (cl *cluster) endpointChurn(ctx context.Context, p *process, metricsURL, hdir string) (time.Duration, error) {
	targets := spread(churned(), 0)
	before, _ := scrape(metricsURL)
	start := time.Now()
	added := make([]int, len(targets))
	if err := testutil.Parallel(len(targets), podWorkers, func(j int) error {
		k, err := cl.replaceEndpoint(ctx, targets[j])
		added[j] = k
		return err
	}); err != nil {
		return 0, fmt.Errorf("endpoint churn: %w", err)
	}
	done := func() (bool, string) {
		if *role == "control" {
			m, err := scrape(metricsURL)
			if err != nil {
				return false, err.Error()
			}
			got := reading{metrics: m}.metric("zerodrop_reconcile_total") - reading{metrics: before}.metric("zerodrop_reconcile_total")
			return got >= float64(len(targets)), fmt.Sprintf("%.0f of %d reconciles", got, len(targets))
		}
		servers, _, err := haproxyServed(ctx, hdir)
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for j, k := range added {
			if cl.held[targets[j]] {
				continue
			}
			if !servers[endpointLoopback(k)] && !servers[endpointIP(k)] {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d new endpoints not among HAProxy's servers", missing, len(added))
	}
	return awaitDone(p, start, "endpoint churn", done)
}

// serviceChurn runs the Service churn phase on the process p and returns
// how long until it was applied.
func (cl *cluster) serviceChurn(ctx context.Context, p *process, hdir string) (time.Duration, error) {
	gone := spread(churned(), 0.5)
	cl.mu.Lock()
	first := cl.nextService
	cl.nextService += len(gone)
	cl.mu.Unlock()
	if last := first + len(gone) - 1; last >= 32766 || (last+1)**endpoints > replacementBase {
		return 0, fmt.Errorf("service churn: Service %d has no address left in the pool or for its endpoints", last)
	}
	start := time.Now()
	if err := testutil.Parallel(len(gone), podWorkers, func(j int) error {
		if err := cl.deleteService(ctx, gone[j]); err != nil {
			return err
		}
		i := first + j
		for _, k := range firstEndpoints(i) {
			if err := cl.eps.listen(k); err != nil {
				return err
			}
		}
		if err := createService(ctx, cl.c, i, firstEndpoints(i)); err != nil {
			return err
		}
		if *role == "data-plane" {
			// As the control role writes it (see run).
			return setAddress(ctx, cl.c, i)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("service churn: %w", err)
	}
	done := func() (bool, string) {
		if *role != "data-plane" {
			return cl.addressedAndGone(ctx, first, gone)
		}
		_, frontends, err := haproxyServed(ctx, hdir)
		if err != nil {
			return false, err.Error()
		}
		missing, left := 0, 0
		for j := range gone {
			if !frontends[name(first+j)] {
				missing++
			} else if *live && reach(address(first+j)) != nil {
				missing++
			}
			if frontends[name(gone[j])] {
				left++
			}
		}
		return missing == 0 && left == 0, fmt.Sprintf("%d of %d new Services not served, %d deleted ones still served", missing, len(gone), left)
	}
	return awaitDone(p, start, "service churn", done)
}

// deleteService deletes Service i, its EndpointSlice and its endpoints'
// Pods (no garbage collector runs here).
func (cl *cluster) deleteService(ctx context.Context, i int) error {
	meta := metav1.ObjectMeta{Namespace: ns, Name: name(i)}
	if err := cl.c.Delete(ctx, &corev1.Service{ObjectMeta: meta}); err != nil {
		return fmt.Errorf("delete Service %s: %w", name(i), err)
	}
	if err := cl.c.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: meta}); err != nil {
		return fmt.Errorf("delete EndpointSlice %s: %w", name(i), err)
	}
	for _, k := range cl.endpointsOf(i) {
		if err := deletePod(ctx, cl.c, i, k); err != nil {
			return err
		}
	}
	return nil
}

// addressedAndGone says whether the Services first.. have their address in
// their status and the Services gone no longer exist (a finalizer, if the
// controller set one, removed).
func (cl *cluster) addressedAndGone(ctx context.Context, first int, gone []int) (bool, string) {
	var list corev1.ServiceList
	if err := cl.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	have := map[string]bool{}
	addressed := map[string]bool{}
	for _, s := range list.Items {
		have[s.Name] = true
		addressed[s.Name] = len(s.Status.LoadBalancer.Ingress) > 0
	}
	missing, left := 0, 0
	for j := range gone {
		if !addressed[name(first+j)] {
			missing++
		}
		if have[name(gone[j])] {
			left++
		}
	}
	return missing == 0 && left == 0, fmt.Sprintf("%d of %d new Services without their address, %d deleted ones still there", missing, len(gone), left)
}

// haproxyServed reads HAProxy's `show stat` (haproxy.ReadStat) on the admin
// socket of hdir: the hosts of its servers' addresses and the Services
// (name(i)) with a frontend.
func haproxyServed(ctx context.Context, hdir string) (servers, frontends map[string]bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := haproxy.ReadStat(rctx, filepath.Join(hdir, "admin.sock"))
	if err != nil {
		return nil, nil, err
	}
	servers, frontends = map[string]bool{}, map[string]bool{}
	prefix := "zd:" + ns + "."
	for _, r := range rows {
		switch {
		case r.IsFrontend():
			// zd:<namespace>.<name>:<listener>
			if rest, ok := strings.CutPrefix(r.Proxy, prefix); ok {
				svc, _, _ := strings.Cut(rest, ":")
				frontends[svc] = true
			}
		case r.Name != "BACKEND" && r.Addr != "":
			if host, _, err := net.SplitHostPort(r.Addr); err == nil {
				servers[host] = true
			}
		}
	}
	return servers, frontends, nil
}

// awaitDone polls done every second until it holds, the process exits or
// -timeout passes, and returns the time since start.
func awaitDone(p *process, start time.Time, phase string, done func() (bool, string)) (time.Duration, error) {
	for {
		if err := p.exited(); err != nil {
			return 0, err
		}
		ok, state := done()
		if ok {
			return time.Since(start), nil
		}
		if time.Since(start) > *timeout {
			return 0, fmt.Errorf("%s not applied after %s: %s", phase, *timeout, state)
		}
		time.Sleep(time.Second)
	}
}

// churnPhases runs endpoint churn, then Service churn, on the process p,
// a row each.
func churnPhases(ctx context.Context, cl *cluster, p *process, m *meter, metricsURL, hdir string) error {
	m.start()
	took, err := cl.endpointChurn(ctx, p, metricsURL, hdir)
	if err != nil {
		return err
	}
	m.row(fmt.Sprintf("endpoint churn (%d Services, one endpoint each)", churned()), took, p.read(metricsURL, hdir))
	fmt.Printf("endpoint churn: applied after %s\n", took.Round(100*time.Millisecond))
	m.start()
	if took, err = cl.serviceChurn(ctx, p, hdir); err != nil {
		return err
	}
	m.row(fmt.Sprintf("Service churn (%d deleted, %d created)", churned(), churned()), took, p.read(metricsURL, hdir))
	fmt.Printf("Service churn: applied after %s\n", took.Round(100*time.Millisecond))
	return nil
}
