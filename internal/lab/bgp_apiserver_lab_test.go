package lab

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// bgpAPIServerLabEnv turns TestLabBGPAPIServerDown on.
const bgpAPIServerLabEnv = "ZERODROP_LAB_BGP_APISERVER"

// TestLabBGPAPIServerDown runs apiserver-down (kube-apiserver stopped
// with SIGSTOP for --apiserver-outage, 30 s, while nothing changes) on
// zerodrop installed from the chart over two data-plane nodes behind FRR
// (--router frr-ecmp), and polls the router's next hops for the Service's
// address from its kernel every 100 ms from the traffic's start to its
// end (watchHops, as TestLabBGPSpeakerRestart does). Each node's speaker decides what it
// announces from a connection to the address on its own node, not from
// the API server, and keeps the Node's last state while it cannot read
// it: an outage must not withdraw a serving node. The test fails on any
// change of the next-hop set, on any failed request (but for a stall of
// the lab's own client) or broken WebSocket, on a session with the router
// that dropped, and unless the outage fell inside the polled window.
//
// One lab of about two minutes, so it runs only when asked:
//
//	ZERODROP_LAB_BGP_APISERVER=1 go test -count=1 -v -run TestLabBGPAPIServerDown ./internal/lab/
func TestLabBGPAPIServerDown(t *testing.T) {
	if os.Getenv(bgpAPIServerLabEnv) == "" {
		t.Skipf("set %s=1 to run apiserver-down behind FRR", bgpAPIServerLabEnv)
	}
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var af apiserverFigures
	res := frrRun(t, 6*time.Minute, func(ctx context.Context, lines *lineWatch, workDir string) {
		af = watchThroughOutage(t, ctx, lines)
		af.outage = outageMarks(filepath.Join(workDir, "lab.log"))
		// Logged here: a lossy run makes frrRun fail before it returns.
		af.log(t)
	}, "--scenario", report.ScenarioAPIServerDown, "--backend", "ip", "--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
	t.Logf("apiserver-down through FRR: %d requests, %d failed (%d by a client stall), %d long connections, %d broken; connections per node %v",
		res.Requests, res.FailedRequests, res.RequestsLateStall, res.LongConns, res.LongConnsBroken, res.DataPlaneSessions)
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	if res.FailedRequests-res.RequestsLateStall != 0 || res.LongConnsBroken != 0 {
		t.Errorf("the API server's outage through the router lost traffic: %d failed (%d by a client stall), %d broken long connections",
			res.FailedRequests, res.RequestsLateStall, res.LongConnsBroken)
	}
	if c := res.Chaos; c == nil || c.OutageSeconds < report.DefaultAPIServerOutage.Seconds() {
		t.Errorf("the API server was not stopped for %s: %+v", report.DefaultAPIServerOutage, res.Chaos)
	}
	af.check(t)
}

// apiserverFigures are what watchThroughOutage saw.
type apiserverFigures struct {
	addr    netip.Prefix
	hops    []netip.Addr // the router's next hops when the traffic started
	polls   int
	changes []hopChange
	polled  [2]time.Duration // the polls' first and last read, from the traffic's start
	// before and after are the router's sessions when the polls started
	// and once the traffic ended.
	before, after map[netip.Addr]dataplane.Session
	// outage is the lab's marks of the API server's stop and resume, from
	// the traffic's start (nil when its log does not have them).
	outage []time.Duration
}

func (af apiserverFigures) log(t *testing.T) {
	t.Logf("router next hops of %s: %v, read %d times from %.1fs to %.1fs after the traffic started; changes: %v",
		af.addr, af.hops, af.polls, af.polled[0].Seconds(), af.polled[1].Seconds(), af.changes)
	if len(af.outage) == 2 {
		t.Logf("kube-apiserver stopped from %.1fs to %.1fs after the traffic started", af.outage[0].Seconds(), af.outage[1].Seconds())
	}
	for host, s := range af.after {
		b := af.before[host]
		t.Logf("router session with %s: %s, established %d -> %d times, dropped %d -> %d times",
			host, s.State, b.Established, s.Established, b.Dropped, s.Dropped)
	}
}

// check asserts the behaviour: both nodes routed, the set never changed,
// the outage inside the polled window, and the sessions never dropped.
func (af apiserverFigures) check(t *testing.T) {
	if af.polls == 0 {
		t.Fatal("the router's next hops were never read")
	}
	if len(af.hops) != 2 {
		t.Errorf("the router routed %s through %v when the traffic started, want both nodes", af.addr, af.hops)
	}
	if len(af.changes) > 0 {
		t.Errorf("the router's next-hop set for %s changed while the API server was down: %v", af.addr, af.changes)
	}
	if len(af.outage) != 2 || af.outage[0] < af.polled[0] || af.outage[1] > af.polled[1] {
		t.Errorf("the API server's outage %v (from the traffic's start) was not inside the polled window %v", af.outage, af.polled)
	}
	if dataplane.Established(af.before) != 2 || len(af.after) != 2 {
		t.Errorf("the router's sessions: %v before, %v after; want both nodes' Established", af.before, af.after)
	}
	for host, s := range af.after {
		if b := af.before[host]; s.State != "Established" || s.Dropped != b.Dropped || s.Established != b.Established {
			t.Errorf("session with %s: %s, dropped %d -> %d, established %d -> %d; want Established throughout", host, s.State, b.Dropped, s.Dropped, b.Established, s.Established)
		}
	}
}

// watchThroughOutage finds the address the router routes through both
// nodes, reads the sessions, and polls the address's next hops every
// 100 ms until the traffic ends; then reads the sessions again.
func watchThroughOutage(t *testing.T, ctx context.Context, lines *lineWatch) (af apiserverFigures) {
	t.Helper()
	start := time.Now() // the traffic's start, within the lab's progress line
	router, vty, err := labRouter()
	if err != nil {
		t.Error(err)
		return af
	}
	frr := dataplane.OpenFRR(vty)
	within := netip.MustParsePrefix(cluster.FrontendNet)
	routes, err := dataplane.NextHops(ctx, router, within)
	if err != nil {
		t.Error(err)
		return af
	}
	for p, hops := range routes {
		if p.Bits() == 32 && len(hops) > len(af.hops) {
			af.addr, af.hops = p, hops
		}
	}
	if !af.addr.IsValid() {
		t.Errorf("the router routes nothing in %s: %v", within, routes)
		return af
	}
	if af.before, err = frr.Sessions(ctx); err != nil {
		t.Error(err)
		return af
	}
	af.polled[0] = time.Since(start)
	w := watchHops(ctx, router, af.addr, af.hops)
	select {
	case <-lines.seen("traffic end"):
	case <-ctx.Done():
	}
	af.polls, af.changes = w.Stop()
	af.polled[1] = time.Since(start)
	if af.after, err = frr.Sessions(ctx); err != nil {
		t.Error(err)
	}
	return af
}

// outageRE matches the lab's marks of apiserver-down (run.mark's "LABEL
// at S.Ss", S from the traffic's start).
var outageRE = regexp.MustCompile(`kube-apiserver (?:stopped for \S+|resumed) at ([0-9.]+)s`)

// outageMarks are the API server's stop and resume in the lab's log, from
// the traffic's start; nil unless both are there.
func outageMarks(logPath string) []time.Duration {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	var out []time.Duration
	for _, m := range outageRE.FindAllStringSubmatch(string(b), -1) {
		s, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil
		}
		out = append(out, time.Duration(s*float64(time.Second)))
	}
	if len(out) != 2 {
		return nil
	}
	return out
}
