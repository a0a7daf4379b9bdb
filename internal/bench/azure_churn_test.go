package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
)

var (
	azChurnServices = flag.Int("azure-churn-n", 1000, "LoadBalancer Services for BenchmarkAzureChurn")
	azChurnLBs      = flag.Int("azure-churn-lbs", 4, "load balancers (--azure-load-balancers) the Services of BenchmarkAzureChurn spread over; Azure allows 600 frontends on each")
	azChurnRate     = flag.Int("azure-churn-rate", 20, "BenchmarkAzureChurn: EndpointSlice changes a second, each on a random Service")
	azChurnFor      = flag.Duration("azure-churn-for", time.Minute, "BenchmarkAzureChurn: how long the endpoint churn lasts")
)

const (
	azChurnNS = "azure-churn"
	// azWindow is the window of the peak rates: ARM's write bucket holds
	// 200 and refills at 10 a second, so a burst shorter than this is what
	// the bucket is for, and a peak over it is what "sustained" means.
	azWindow = 10 * time.Second
)

// BenchmarkAzureChurn measures the shipped controller on the ARM emulator
// with ARM's throttling (azurearm.ARMThrottle) and a Standard Load
// Balancer's limits (azurearm.StandardLBLimits) on: -azure-churn-n Services
// spread over -azure-churn-lbs load balancers are built, then their
// EndpointSlices change -azure-churn-rate times a second, each change on a
// random Service, for -azure-churn-for; the bench reports the ARM writes a
// second (peak over any 10 s, mean), the reads a second, the throttled
// answers (429) by kind and the time to converge once the churn stops. It
// fails only when the load balancers never match the objects; the figures
// are reported, not asserted (issue 49's acceptance reads them).
func BenchmarkAzureChurn(b *testing.B) {
	crlog.SetLogger(logr.Discard())
	n, rate, churnFor := *azChurnServices, *azChurnRate, *azChurnFor
	if n < 1 || n > 250*240 || *azChurnLBs < 1 || rate < 1 || churnFor <= 0 {
		b.Fatalf("-azure-churn-n %d (1 to 60,000), -azure-churn-lbs %d, -azure-churn-rate %d, -azure-churn-for %s: want each positive",
			n, *azChurnLBs, rate, churnFor)
	}
	lbs := azureLBNames(*azChurnLBs)
	rc, c := azBenchCluster(b, azChurnNS)
	ctx := context.Background()
	start := time.Now()
	parallel(b, n, 8, func(i int) error {
		if err := c.Create(ctx, azChurnService(i)); err != nil {
			return err
		}
		return c.Create(ctx, azChurnSlice(i, 0))
	})
	fmt.Printf("created %d Services and EndpointSlices in %s\n", n, time.Since(start).Round(time.Millisecond))

	// RecordPolls: the reads counted are every GET, the SDK's polls too.
	emu := azurearm.New(azurearm.Options{Throttle: azurearm.ARMThrottle, Limits: azurearm.StandardLBLimits, RecordPolls: true})
	emu.SetRuleHealth(azProbesUp(emu))
	gens := make([]int, n)
	r := azChurnStart(b, rc, emu, lbs)
	defer r.stop(b)
	start = time.Now()
	azChurnConverge(b, emu, lbs, gens, start.Add(30*time.Minute), "the build")
	built := time.Now()
	fmt.Printf("built %d Services on %d load balancers in %s\n", n, len(lbs), built.Sub(start).Round(time.Millisecond))
	azureIdle(r.azureController)

	// The churn: each change moves one of a random Service's two endpoints
	// to a new address (the other stays), as a rollout of one pod would.
	// Change k is due k/rate after the start; one that the API server's
	// answers delayed goes at once, so the count and the mean rate hold.
	rnd := rand.New(rand.NewPCG(49, 1))
	churnStart := time.Now()
	total := int(churnFor.Seconds() * float64(rate))
	changes := 0
	for ; changes < total; changes++ {
		time.Sleep(time.Until(churnStart.Add(time.Duration(changes) * time.Second / time.Duration(rate))))
		i := rnd.IntN(n)
		gens[i]++
		// One merge patch a change (not a read and an update), so that
		// the API server's answer time takes less off the rate.
		patch, err := json.Marshal(map[string]any{"endpoints": azChurnSlice(i, gens[i]).Endpoints})
		if err != nil {
			b.Fatal(err)
		}
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: azChurnNS, Name: azureName(i)}}
		if err := c.Patch(ctx, sl, client.RawPatch(types.MergePatchType, patch)); err != nil {
			b.Fatal(err)
		}
	}
	churnEnd := time.Now()
	azChurnConverge(b, emu, lbs, gens, churnEnd.Add(10*time.Minute), "after the churn")
	converged := time.Now()
	idle := azureIdle(r.azureController)

	calls, _ := emu.Calls(0)
	// Recorded in the order they took the emulator's lock, which may
	// differ from their times by a hair; the windows want time order.
	slices.SortStableFunc(calls, func(x, y azurearm.Call) int { return x.Time.Compare(y.Time) })
	build := azCallsBetween(calls, start, churnStart)
	churn := azCallsBetween(calls, churnStart, idle.Add(time.Millisecond))
	during := azCallsBetween(calls, churnStart, churnEnd)
	puts, writes := azMethod(churn, http.MethodPut), azWrites(churn)
	duringPuts, duringWrites := azMethod(during, http.MethodPut), azWrites(during)
	toConverge := azWrites(azCallsBetween(calls, churnStart, converged))
	secs := churnEnd.Sub(churnStart).Seconds()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nAzure (ARM emulator, ARM throttling and Standard Load Balancer limits on): endpoint churn, %d Services on %d load balancers, %d EndpointSlice changes/s on random Services for %s\n",
		n, len(lbs), rate, churnFor)
	fmt.Fprintln(w, flagsLine(r.flags))
	fmt.Fprintf(w, "build\t%s, %d PUTs, %d GETs, throttled (429): %s\n", built.Sub(start).Round(time.Millisecond),
		len(azMethod(build, http.MethodPut)), len(azMethod(build, http.MethodGet)), azThrottled(build))
	fmt.Fprintf(w, "endpoint changes\t%d in %s\n", changes, churnEnd.Sub(churnStart).Round(time.Millisecond))
	fmt.Fprintln(w, "from the churn's start to idle:")
	fmt.Fprintf(w, "writes (PUT)\t%d (%s); peak %.1f/s over %s, mean %.2f/s during the churn\n",
		len(puts), azByKind(puts), azPeak(puts, azWindow), azWindow, float64(len(duringPuts))/secs)
	fmt.Fprintf(w, "ARM's writes (PUT, PATCH, POST, DELETE)\t%d (%s); peak %.1f/s over %s, mean %.2f/s during the churn, %.2f/s to convergence\n",
		len(writes), azByKind(writes), azPeak(writes, azWindow), azWindow, float64(len(duringWrites))/secs,
		float64(len(toConverge))/converged.Sub(churnStart).Seconds())
	gets := azMethod(churn, http.MethodGet)
	fmt.Fprintf(w, "reads (GET, the operations' polls and results included)\t%d (%s); peak %.1f/s over %s; beyond the budget's bucket (--azure-read-qps %g, --azure-read-burst %d) over any interval: %.1f\n",
		len(gets), azByKind(gets), azPeak(gets, azWindow), azWindow, r.cfg.Azure.Read.QPS, r.cfg.Azure.Read.Burst,
		azBeyondBucket(gets, r.cfg.Azure.Read.QPS, r.cfg.Azure.Read.Burst))
	fmt.Fprintf(w, "throttled (429)\t%s\n", azThrottled(churn))
	fmt.Fprintf(w, "other errors\t%s\n", azErrors(churn))
	fmt.Fprintf(w, "converged\t%s after the churn stopped (a replaced endpoint drains for %s, the default drain timeout, before it goes)\n",
		converged.Sub(churnEnd).Round(time.Millisecond), model.DefaultDrainTimeout)
	w.Flush()
	b.ReportMetric(azPeak(writes, azWindow), "peak-writes/s")
	b.ReportMetric(float64(len(duringWrites))/secs, "mean-writes/s")
	b.ReportMetric(float64(len(azStatus(churn, http.StatusTooManyRequests))), "throttled")
	b.ReportMetric(converged.Sub(churnEnd).Seconds(), "converge-s")
}

// azChurnController is a controller of the Azure benches and the
// configuration it runs with.
type azChurnController struct {
	*azureController
	cfg controller.Config
}

// azChurnStart starts the controller as `zerodrop controller --provider
// azure` runs with the bench's site flags (and what mods set, which the
// flags line lists): every other setting shipped, the read limit, workers,
// coalescing and leader election included.
func azChurnStart(b *testing.B, rc *rest.Config, emu *azurearm.Emulator, lbs []string, mods ...func(*controller.Config)) *azChurnController {
	b.Helper()
	cfg := benchConfig(rc)
	// Shipped (benchConfig makes it an hour): the figures are the
	// controller's as it runs, resyncs included.
	cfg.ResyncPeriod = controller.DefaultConfig().ResyncPeriod
	cfg.Provider = "azure"
	cfg.Azure.SubscriptionID, cfg.Azure.ResourceGroup = azSub, azGroup
	cfg.Azure.LoadBalancers = strings.Join(lbs, ",")
	cfg.Azure.SubnetID = azSubnet
	cfg.Azure.Location = "westeurope"
	cfg.Azure.Credential, cfg.Azure.ClientOptions = emu.Credential(), emu.ClientOptions()
	for _, m := range mods {
		m(&cfg)
	}
	r := startBench(b, cfg)
	return &azChurnController{&azureController{benchController: r, metrics: r.Metrics, flags: ipMode(newModeFlags("zerodrop", cfg))}, cfg}
}

// The Azure site of BenchmarkAzureRestart's controller, which the churn
// and gate-only benches share.
const (
	azSub    = "00000000-0000-0000-0000-000000000001"
	azGroup  = "rg-bench"
	azVNet   = "/subscriptions/" + azSub + "/resourceGroups/" + azGroup + "/providers/Microsoft.Network/virtualNetworks/vnet"
	azSubnet = azVNet + "/subnets/lb"
)

// unlimitedREST is the API server's config without a client-side rate
// limit, as `zerodrop controller` gets it from controller-runtime's
// GetConfig (client-go's default, 5 a second, would make the status writes
// of 1,000 Services the bench's subject).
// azBenchCluster starts the bench's API server and returns its
// configuration without a client-side limit, a client of it and namespace
// ns, created.
func azBenchCluster(b *testing.B, ns string) (*rest.Config, client.Client) {
	b.Helper()
	env := controlplane.StartEnv(b)
	rc := unlimitedREST(env.Config)
	c, err := client.New(rc, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	return rc, c
}

func unlimitedREST(rc *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(rc)
	cfg.QPS = -1
	return cfg
}

// azChurnService is azureService in the churn's namespace at the shipped
// drain timeout (azureService shortens it to 2 s).
func azChurnService(i int) *corev1.Service {
	s := azureService(i)
	s.Namespace = azChurnNS
	delete(s.Annotations, model.AnnotationDrainTimeout)
	return s
}

func azChurnSlice(i, g int) *discoveryv1.EndpointSlice {
	s := azureSlice(i, g)
	s.Namespace = azChurnNS
	return s
}

// azChurnConverge waits until every Service's rule on the emulated load
// balancers has exactly its endpoints of generation gens[i], each serving
// (admin state None: no drain left), and fails the bench past deadline.
func azChurnConverge(b *testing.B, emu *azurearm.Emulator, lbs []string, gens []int, deadline time.Time, what string) {
	b.Helper()
	for {
		miss := azChurnMismatch(emu, lbs, gens)
		if miss == "" {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: the load balancers never matched the objects (%s); emulator %+v", what, miss, emu.Counters())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// azChurnMismatch names the first Service whose rule does not hold its
// endpoints, and how many do not; "" when none.
func azChurnMismatch(emu *azurearm.Emulator, lbs []string, gens []int) string {
	got := map[string][]string{} // rule name → its pool's addresses
	for _, name := range lbs {
		lb, ok := emu.LoadBalancer(azGroup, name)
		if !ok || lb.Properties == nil {
			continue
		}
		pools := map[string][]string{}
		for _, p := range lb.Properties.BackendAddressPools {
			if p.ID == nil || p.Properties == nil {
				continue
			}
			for _, a := range p.Properties.LoadBalancerBackendAddresses {
				if a.Properties == nil || a.Properties.IPAddress == nil {
					continue
				}
				state := "None"
				if a.Properties.AdminState != nil {
					state = string(*a.Properties.AdminState)
				}
				pools[strings.ToLower(*p.ID)] = append(pools[strings.ToLower(*p.ID)], *a.Properties.IPAddress+"="+state)
			}
		}
		for _, r := range lb.Properties.LoadBalancingRules {
			if r.Name == nil || r.Properties == nil || r.Properties.BackendAddressPool == nil || r.Properties.BackendAddressPool.ID == nil {
				continue
			}
			got[*r.Name] = pools[strings.ToLower(*r.Properties.BackendAddressPool.ID)]
		}
	}
	first, bad := "", 0
	for i, g := range gens {
		var want []string
		for _, ep := range azChurnSlice(i, g).Endpoints {
			want = append(want, ep.Addresses[0]+"=None")
		}
		rule := fmt.Sprintf("zd-%s.%s.tcp-80", azChurnNS, azureName(i))
		have := slices.Clone(got[rule])
		sort.Strings(want)
		sort.Strings(have)
		if !slices.Equal(have, want) {
			if bad == 0 {
				first = fmt.Sprintf("%s: %v, want %v", rule, have, want)
			}
			bad++
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d Services differ, first %s", bad, first)
}

// azCalls is the calls keep selects, in order: the one filter the bench's
// selections below share.
func azCalls(calls []azurearm.Call, keep func(azurearm.Call) bool) []azurearm.Call {
	var out []azurearm.Call
	for _, c := range calls {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// azCallsBetween is the calls in [from, to).
func azCallsBetween(calls []azurearm.Call, from, to time.Time) []azurearm.Call {
	return azCalls(calls, func(c azurearm.Call) bool { return !c.Time.Before(from) && c.Time.Before(to) })
}

func azMethod(calls []azurearm.Call, method string) []azurearm.Call {
	return azCalls(calls, func(c azurearm.Call) bool { return c.Method == method })
}

// azWrites is the calls ARM meters as writes or deletes: every method but
// GET and HEAD.
func azWrites(calls []azurearm.Call) []azurearm.Call {
	return azCalls(calls, func(c azurearm.Call) bool { return c.Method != http.MethodGet && c.Method != http.MethodHead })
}

// azByKind counts calls by method and route, "PUT backendAddressPool 12, …".
func azByKind(calls []azurearm.Call) string {
	by := map[string]int{}
	for _, c := range calls {
		by[c.Method+" "+c.Kind]++
	}
	if len(by) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// azErrors counts the answers of status 400 or more but 429, by method,
// route and status.
func azErrors(calls []azurearm.Call) string {
	var bad []azurearm.Call
	for _, c := range calls {
		if c.Status >= http.StatusBadRequest && c.Status != http.StatusTooManyRequests {
			c.Kind = fmt.Sprintf("%s %d", c.Kind, c.Status)
			bad = append(bad, c)
		}
	}
	if len(bad) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", len(bad), azByKind(bad))
}

// azProbesUp answers the rule-health operation as a data plane whose
// endpoints all answer their probes: each address of the rule's pool is Up
// unless its admin state takes it out (a drain), as Azure reports a backend
// it sends nothing to.
func azProbesUp(emu *azurearm.Emulator) azurearm.RuleHealth {
	return func(rg, name, rule string) ([]azurearm.BackendHealth, error) {
		lb, ok := emu.LoadBalancer(rg, name)
		if !ok || lb.Properties == nil {
			return nil, fmt.Errorf("no load balancer %s/%s", rg, name)
		}
		pool := ""
		for _, r := range lb.Properties.LoadBalancingRules {
			if r.Name != nil && strings.EqualFold(*r.Name, rule) && r.Properties != nil && r.Properties.BackendAddressPool != nil && r.Properties.BackendAddressPool.ID != nil {
				pool = *r.Properties.BackendAddressPool.ID
			}
		}
		var out []azurearm.BackendHealth
		for _, p := range lb.Properties.BackendAddressPools {
			if p.ID == nil || !strings.EqualFold(*p.ID, pool) || p.Properties == nil {
				continue
			}
			for _, a := range p.Properties.LoadBalancerBackendAddresses {
				if a.Properties == nil || a.Properties.IPAddress == nil {
					continue
				}
				state := "Up"
				if a.Properties.AdminState != nil && *a.Properties.AdminState != "None" {
					state = "Down"
				}
				out = append(out, azurearm.BackendHealth{IPAddress: *a.Properties.IPAddress, State: state})
			}
		}
		return out, nil
	}
}

func azStatus(calls []azurearm.Call, status int) []azurearm.Call {
	return azCalls(calls, func(c azurearm.Call) bool { return c.Status == status })
}

// azThrottled counts the 429s by ARM's bucket (reads: GET; deletes; writes:
// every other method, POST included, as the emulator meters them).
func azThrottled(calls []azurearm.Call) string {
	by := map[string]int{}
	total := 0
	for _, c := range azStatus(calls, http.StatusTooManyRequests) {
		kind := "writes"
		switch c.Method {
		case http.MethodGet, http.MethodHead:
			kind = "reads"
		case http.MethodDelete:
			kind = "deletes"
		}
		by[kind+" ("+c.Method+")"]++
		total++
	}
	if total == 0 {
		return "0"
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// azPeak is the most calls in any window of length d, a second; calls are
// in time order.
// azBeyondBucket is how far calls (sorted by time) exceed a token bucket of
// qps a second and burst at once: the most calls in any interval [t1, t2]
// less burst + qps·(t2 - t1); zero or less: within it everywhere. A
// bucket that grants each call before it is recorded keeps it at or below
// zero whatever the delays between the two.
func azBeyondBucket(calls []azurearm.Call, qps float64, burst int) float64 {
	if len(calls) == 0 {
		return 0
	}
	t0 := calls[0].Time
	// For each j, the most calls i..j less qps·(t_j - t_i) is
	// (j - qps·t_j) - min over i <= j of (i - qps·t_i), plus one.
	worst, low := math.Inf(-1), math.Inf(1)
	for j, c := range calls {
		x := float64(j) - qps*c.Time.Sub(t0).Seconds()
		low = math.Min(low, x)
		worst = math.Max(worst, x-low+1)
	}
	return worst - float64(burst)
}

func azPeak(calls []azurearm.Call, d time.Duration) float64 {
	most := 0
	j := 0
	for i := range calls {
		for j < len(calls) && calls[j].Time.Sub(calls[i].Time) < d {
			j++
		}
		most = max(most, j-i)
	}
	return float64(most) / d.Seconds()
}
