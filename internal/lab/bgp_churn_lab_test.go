package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// churnServices is how many Services TestLabBGPServiceChurn creates and
// deletes (issue 51's acceptance point).
const churnServices = 100

// churnPhaseMax bounds the creates' and the deletes' waits for the router
// (the rollout, and so the traffic, is held meanwhile).
const churnPhaseMax = 90 * time.Second

// TestLabBGPServiceChurn: 100 Services created and deleted while the
// rollout's WebSockets stay open on another Service, through a real router
// (--router frr-ecmp, --from-chart, two data-plane nodes; the same run as
// TestLabBGPSpeakerRestart). Once the traffic has started, the test pauses
// the workload's rollout (the traffic lasts until the rollout is done, and
// the churn takes longer; resumed after it), creates 100 LoadBalancer
// Services beside the workload's (its class, ports and selector), waits
// until the router routes every one of their addresses through both nodes
// (each speaker put the address on its own link and announced it), deletes
// them all, and waits until the router routes none. Nothing may break; the
// router's next hops for the workload's address, polled from its kernel
// every 100 ms from before the first create until the last withdrawal,
// never change; and the router's sessions with both nodes are Established
// with the same counts of established and dropped connections before and
// after.
func TestLabBGPServiceChurn(t *testing.T) {
	skipUnlessLong(t)
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var cf churnFigures
	roll := frrRollout(t, func(ctx context.Context, lines *lineWatch, workDir string) {
		cf = churnServicesUnderTraffic(t, ctx, lines, workDir)
	})
	t.Logf("rollout through FRR with %d Services created and deleted: %d requests, %d failed (%d by a client stall), %d long connections, %d broken",
		churnServices, roll.Requests, roll.FailedRequests, roll.RequestsLateStall, roll.LongConns, roll.LongConnsBroken)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	if roll.FailedRequests-roll.RequestsLateStall != 0 || roll.LongConnsBroken != 0 {
		t.Errorf("the Services' churn through the router lost traffic: %d failed (%d by a client stall), %d broken long connections",
			roll.FailedRequests, roll.RequestsLateStall, roll.LongConnsBroken)
	}
	if roll.LongConns == 0 {
		t.Errorf("no long connection was open on the workload's Service: nothing measured")
	}
	if cf.polls == 0 {
		t.Fatal("the router's next hops were never read")
	}
	t.Logf("churn: %d Services announced through both nodes %.1fs after the first create, every route gone %.1fs after the first delete",
		cf.announced, cf.upTook.Seconds(), cf.downTook.Seconds())
	t.Logf("router next hops of %s: %v, read %d times from before the first create until the last withdrawal; changes: %v",
		cf.addr, cf.hops, cf.polls, cf.changes)
	for host, s := range cf.after {
		b := cf.before[host]
		t.Logf("router session with %s: %s, established %d → %d times, dropped %d → %d times",
			host, s.State, b.Established, s.Established, b.Dropped, s.Dropped)
	}
	if len(cf.hops) != 2 {
		t.Errorf("the router routed %s through %v before the churn, want both nodes", cf.addr, cf.hops)
	}
	if len(cf.changes) > 0 {
		t.Errorf("the router's next-hop set for %s changed while the Services came and went: %v", cf.addr, cf.changes)
	}
	if cf.announced != churnServices || !cf.withdrawn {
		t.Errorf("%d of %d Services announced through both nodes, all withdrawn %t: the churn did not reach the router",
			cf.announced, churnServices, cf.withdrawn)
	}
	if cf.trafficEndedFirst {
		t.Errorf("the rollout's traffic ended before the churn did: the churn was not measured under traffic")
	}
	if len(cf.after) != 2 {
		t.Errorf("sessions after the churn: %v, want both nodes'", cf.after)
	}
	for host, s := range cf.after {
		b := cf.before[host]
		if s.State != "Established" || s.Established != b.Established || s.Dropped != b.Dropped {
			t.Errorf("session with %s: %s, established %d → %d, dropped %d → %d; want Established and both counts unchanged",
				host, s.State, b.Established, s.Established, b.Dropped, s.Dropped)
		}
	}
}

// churnFigures are what churnServicesUnderTraffic saw.
type churnFigures struct {
	addr    netip.Prefix
	hops    []netip.Addr // the router's next hops before the churn
	polls   int
	changes []string
	// before and after are the router's sessions, by node.
	before, after map[netip.Addr]dataplane.Session
	// announced: how many of the Services' addresses the router routed
	// through both nodes at once; withdrawn: none routed after the deletes.
	announced        int
	withdrawn        bool
	upTook, downTook time.Duration
	// trafficEndedFirst: the lab's traffic ended before the churn did.
	trafficEndedFirst bool
}

// churnServicesUnderTraffic finds the workload's Service by the address
// the router routes through both nodes, reads the sessions, polls that
// address's next hops every 100 ms, creates the Services and waits for
// their routes, deletes them and waits for their routes to go, then reads
// the sessions again.
func churnServicesUnderTraffic(t *testing.T, ctx context.Context, lines *lineWatch, workDir string) (cf churnFigures) {
	t.Helper()
	router, vty, err := labRouter()
	if err != nil {
		t.Error(err)
		return cf
	}
	frr := dataplane.OpenFRR(vty)
	within := netip.MustParsePrefix(cluster.FrontendNet)
	routes, err := dataplane.NextHops(ctx, router, within)
	if err != nil {
		t.Error(err)
		return cf
	}
	for p, hops := range routes {
		if p.Bits() == 32 && len(hops) > len(cf.hops) {
			cf.addr, cf.hops = p, hops
		}
	}
	if !cf.addr.IsValid() || len(cf.hops) != 2 {
		t.Errorf("the router routes nothing in %s through both nodes: %v", within, routes)
		return cf
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(workDir, "kubeconfig"))
	if err != nil {
		t.Error(err)
		return cf
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Error(err)
		return cf
	}
	workload, err := serviceAt(ctx, client, cf.addr.Addr())
	if err != nil {
		t.Error(err)
		return cf
	}
	// The rollout (2 s after the traffic starts) is held until the churn
	// is over: the lab's traffic and WebSockets last until the rollout is
	// done, and 100 Services take longer than it.
	if err := pauseRollout(ctx, client, workload, true); err != nil {
		t.Error(err)
		return cf
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = pauseRollout(context.WithoutCancel(ctx), client, workload, false)
		}
	}()
	if cf.before, err = frr.Sessions(ctx); err != nil || dataplane.Established(cf.before) != 2 {
		t.Errorf("the router's sessions before the churn: %v (%v), want both nodes' Established", cf.before, err)
		return cf
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		prev := cf.hops
		for {
			got, err := dataplane.NextHops(ctx, router, cf.addr)
			switch {
			case err != nil:
				cf.changes = append(cf.changes, err.Error())
			case !slices.Equal(got[cf.addr], prev):
				cf.changes = append(cf.changes, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), got[cf.addr]))
				prev = got[cf.addr]
			}
			cf.polls++
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		select {
		case <-lines.seen("traffic end"):
			cf.trafficEndedFirst = true
		default:
		}
		if cf.after != nil {
			return
		}
		if s, err := frr.Sessions(ctx); err != nil {
			t.Error(err)
		} else {
			cf.after = s
		}
	}()

	names := make([]string, churnServices)
	for i := range names {
		names[i] = fmt.Sprintf("bgp-churn-%03d", i)
	}
	svcs := client.CoreV1().Services(workload.Namespace)
	t.Cleanup(func() {
		for _, n := range names {
			_ = svcs.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	// The run's pool: the workload's address's (cluster.FrontendPool).
	pool := netip.PrefixFrom(workload.addr, netip.MustParsePrefix(cluster.FrontendPool(0)).Bits()).Masked()
	began := time.Now()
	if err := eachService(ctx, names, func(ctx context.Context, name string) error {
		_, err := svcs.Create(ctx, churnService(workload.svc, name), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Errorf("create the Services: %v", err)
		return cf
	}
	t.Logf("%d Services created in %.1fs", churnServices, time.Since(began).Seconds())
	// Announced: every one's address routed through both nodes.
	for ctx.Err() == nil {
		n, err := routedBoth(ctx, router, pool, cf.addr)
		if err == nil {
			cf.announced = max(cf.announced, n)
		}
		if cf.announced == churnServices {
			break
		}
		if !trafficRuns(lines, 250*time.Millisecond) {
			t.Logf("the traffic ended with %d of %d Services announced", cf.announced, churnServices)
			return cf
		}
		if time.Since(began) > churnPhaseMax {
			t.Errorf("%d of %d Services announced after %s", cf.announced, churnServices, churnPhaseMax)
			return cf
		}
	}
	cf.upTook = time.Since(began)

	began = time.Now()
	if err := eachService(ctx, names, func(ctx context.Context, name string) error {
		err := svcs.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Errorf("delete the Services: %v", err)
		return cf
	}
	for ctx.Err() == nil {
		routes, err := dataplane.NextHops(ctx, router, pool)
		if err == nil && len(routes) == 1 && len(routes[cf.addr]) > 0 {
			cf.withdrawn = true
			break
		}
		if !trafficRuns(lines, 250*time.Millisecond) {
			t.Logf("the traffic ended with %d routes in the run's pool: %v", len(routes), routes)
			return cf
		}
		if time.Since(began) > churnPhaseMax {
			t.Errorf("%d routes in the run's pool %s after the deletes: %v", len(routes), churnPhaseMax, routes)
			return cf
		}
	}
	cf.downTook = time.Since(began)
	// The sessions' counts are read before the rollout goes on (deferred
	// above, after this).
	if s, err := frr.Sessions(ctx); err != nil {
		t.Error(err)
	} else {
		cf.after = s
	}
	resumed = true
	if err := pauseRollout(ctx, client, workload, false); err != nil {
		t.Errorf("resume the rollout: %v", err)
	}
	return cf
}

// pauseRollout pauses (on) or resumes the workload's Deployment: the one
// in the Service's namespace whose pods the Service selects.
func pauseRollout(ctx context.Context, client kubernetes.Interface, w workloadService, on bool) error {
	deps, err := client.AppsV1().Deployments(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var names []string
	for _, d := range deps.Items {
		if labels.SelectorFromSet(w.svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			names = append(names, d.Name)
		}
	}
	if len(names) != 1 {
		return fmt.Errorf("Deployments %v in %s run the Service's pods, want one", names, w.Namespace)
	}
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, on)
	_, err = client.AppsV1().Deployments(w.Namespace).Patch(ctx, names[0], types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// workloadService is the Service whose address the router routes.
type workloadService struct {
	svc       *corev1.Service
	Namespace string
	addr      netip.Addr
}

// serviceAt is the Service whose ingress address is addr.
func serviceAt(ctx context.Context, client kubernetes.Interface, addr netip.Addr) (workloadService, error) {
	list, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return workloadService{}, err
	}
	for i, svc := range list.Items {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP == addr.String() {
				return workloadService{svc: &list.Items[i], Namespace: svc.Namespace, addr: addr}, nil
			}
		}
	}
	return workloadService{}, fmt.Errorf("no Service has the address %s", addr)
}

// churnService is a Service like the workload's (its class, annotations,
// selector and ports, without their node ports), named name.
func churnService(w *corev1.Service, name string) *corev1.Service {
	ports := slices.Clone(w.Spec.Ports)
	for i := range ports {
		ports[i].NodePort = 0
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Annotations: w.Annotations},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     w.Spec.LoadBalancerClass,
			ExternalTrafficPolicy: w.Spec.ExternalTrafficPolicy,
			Selector:              w.Spec.Selector,
			Ports:                 ports,
		},
	}
}

// eachService runs do for every name, 10 at a time.
func eachService(ctx context.Context, names []string, do func(context.Context, string) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(10)
	for _, n := range names {
		g.Go(func() error {
			if err := do(ctx, n); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// routedBoth counts the /32 routes in pool, other than skip, that the
// router routes through two next hops.
func routedBoth(ctx context.Context, router string, pool, skip netip.Prefix) (int, error) {
	routes, err := dataplane.NextHops(ctx, router, pool)
	if err != nil {
		return 0, err
	}
	n := 0
	for p, hops := range routes {
		if p != skip && p.Bits() == 32 && len(hops) == 2 {
			n++
		}
	}
	return n, nil
}

// trafficRuns waits d and reports whether the lab's traffic still runs.
func trafficRuns(lines *lineWatch, d time.Duration) bool {
	select {
	case <-lines.seen("traffic end"):
		return false
	case <-time.After(d):
		return true
	}
}
