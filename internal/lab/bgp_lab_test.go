package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
)

// TestLabBGPSpeakerRestart runs zerodrop installed from the chart over two
// data-plane nodes behind a real router (--router frr-ecmp: FRR's bgpd and
// zebra, hash-threshold ECMP over the nodes' announcements), each node's
// `zerodrop speaker` the chart's haproxy.bgp DaemonSet run by the lab's
// kubelet. While the rollout's traffic and WebSockets run, both speakers
// restart at once, well within the graceful-restart time (120 s): node 0's
// pod is deleted (SIGTERM, the graceful-restart hand-over: no NOTIFICATION,
// no withdrawal; the DaemonSet makes its successor) and node 1's process is
// killed with SIGKILL (the kubelet starts it again after its 10 s
// back-off). Nothing may break, the router's next-hop set for the Service's
// address, polled from its kernel (ip -j route, ip -j nexthop), never
// changes, and each session dropped once and is back, with the new
// speaker's End-of-RIB, before the traffic ends.
func TestLabBGPSpeakerRestart(t *testing.T) {
	started := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	var rs restartFigures
	roll := frrRollout(t, func(ctx context.Context, lines *lineWatch, workDir string) {
		rs = restartSpeakers(t, ctx, lines, workDir)
	})
	t.Logf("rollout through FRR with both speakers restarted: %d requests, %d failed (%d by a client stall), %d long connections, %d broken",
		roll.Requests, roll.FailedRequests, roll.RequestsLateStall, roll.LongConns, roll.LongConnsBroken)
	if roll.FailedRequests-roll.RequestsLateStall != 0 || roll.LongConnsBroken != 0 {
		t.Errorf("the speakers' restarts through the router lost traffic: %d failed (%d by a client stall), %d broken long connections",
			roll.FailedRequests, roll.RequestsLateStall, roll.LongConnsBroken)
	}
	if len(roll.DataPlaneSessions) != 2 || slices.Min(roll.DataPlaneSessions) <= 0 {
		t.Errorf("connections per node %v; want the router to spread over both", roll.DataPlaneSessions)
	}
	t.Logf("own elapsed time %.0fs; load average at the start %s", time.Since(started).Seconds(), strings.TrimSpace(string(load)))
	if rs.polls == 0 {
		t.Fatal("the router's next hops were never read")
	}
	t.Logf("router next hops of %s: %v, read %d times from before the restarts until the traffic ended; changes: %v",
		rs.addr, rs.hops, rs.polls, rs.changes)
	if rs.sessions != nil {
		t.Logf("both sessions back (Established, End-of-RIB received) %.1fs after the signals", rs.back.Seconds())
	}
	for host, s := range rs.sessions {
		t.Logf("router session with %s: %s, established %d times, dropped %d times, %d UPDATEs and %d NOTIFICATIONs received",
			host, s.State, s.Established, s.Dropped, s.Messages.UpdatesRecv, s.Messages.NotificationsRecv)
	}
	if len(rs.hops) != 2 {
		t.Errorf("the router routed %s through %v before the restarts, want both nodes", rs.addr, rs.hops)
	}
	if len(rs.changes) > 0 {
		t.Errorf("the router's next-hop set for %s changed during the speakers' restarts: %v", rs.addr, rs.changes)
	}
	if rs.trafficEndedFirst {
		t.Errorf("the rollout's traffic ended before both speakers were back: the restarts were not measured under traffic")
	}
	if len(rs.sessions) == 0 {
		t.Errorf("the sessions were not back (Established with the new speaker's End-of-RIB) before the traffic ended")
	}
	for host, s := range rs.sessions {
		if s.State != "Established" || s.Dropped != 1 || s.Messages.NotificationsRecv != 0 {
			t.Errorf("session with %s: %s, dropped %d times, %d NOTIFICATIONs; want Established, dropped once by the restart, no NOTIFICATION",
				host, s.State, s.Dropped, s.Messages.NotificationsRecv)
		}
	}
}

// frrRollout runs one rollout of zerodrop's chart on two data-plane nodes
// behind FRR's hash-threshold ECMP (--router frr-ecmp), calls act once the
// traffic has started, and returns the run's result.
func frrRollout(t *testing.T, act func(ctx context.Context, lines *lineWatch, workDir string)) report.Result {
	t.Helper()
	return frrRun(t, 5*time.Minute, act, "--scenario", "rollout", "--data-plane-replicas", "2", "--router", string(dataplane.RouterFRRECMP))
}

// frrRun runs one zerodrop-mode lab of the chart behind FRR with args
// (scenario, replicas, router) within timeout, calls act once the traffic
// has started, and returns the run's result; it fails the test when the lab
// exits non-zero, leaves anything behind in the root namespace, or reports
// other than one run. Its directory is not t.TempDir: a subtest's name
// there would make the HAProxy master socket's path longer than a unix
// socket's 108 bytes.
func frrRun(t *testing.T, timeout time.Duration, act func(ctx context.Context, lines *lineWatch, workDir string), args ...string) report.Result {
	t.Helper()
	before := rootState(t)
	ctx, cancel := context.WithTimeout(interrupted, timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "zdfrr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	jsonPath, workDir := filepath.Join(dir, "lab.json"), filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lines := newLineWatch()
	var stdout bytes.Buffer
	var code int
	labDone := make(chan struct{})
	go func() {
		defer close(labDone)
		code = Run(ctx, append([]string{"--mode", "zerodrop", "--from-chart", "--json", jsonPath, "--html", filepath.Join(dir, "lab.html"),
			"--dir", workDir}, args...), &stdout, lines)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
			logTail(t, workDir)
		}
	})
	select {
	case <-lines.seen("traffic start"):
		act(ctx, lines, workDir)
	case <-labDone:
	}
	<-labDone
	t.Logf("%s\n%s", lines.String(), stdout.String())
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	if d := cmp.Diff(before, rootState(t)); d != "" {
		t.Errorf("the lab left something behind in the root namespace or the process table (-before +after):\n%s", d)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenarios []report.Result `json:"scenarios"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Scenarios) != 1 {
		t.Fatalf("want 1 run, got %s", raw)
	}
	return doc.Scenarios[0]
}

// TestRouterFlag (dry runs only): --router takes stand-in (the default),
// and frr-ecmp or frr-resilient only with --from-chart and --backend ip
// (the data-plane hosts the FRR world routes to run no kube-proxy); the
// plan names the router.
func TestRouterFlag(t *testing.T) {
	chart := []string{"--dry-run", "--from-chart", "--data-plane-replicas", "2", "--scenario", "rollout", "--mode", "zerodrop"}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{slices.Concat(chart, []string{"--router", "frr-ecmp"}), 0, "router frr-ecmp"},
		{slices.Concat(chart, []string{"--router", "frr-resilient"}), 0, "router frr-resilient"},
		{slices.Concat(chart, []string{"--router", "stand-in"}), 0, "2 data-plane replicas"},
		{[]string{"--dry-run", "--router", "frr-ecmp"}, 2, "with --from-chart and --backend ip"},
		{slices.Concat(chart, []string{"--router", "frr-resilient", "--backend", "node"}), 2, "with --from-chart and --backend ip"},
		{slices.Concat(chart, []string{"--router", "bgp"}), 2, `--router "bgp"`},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("zerodrop lab %v: exit %d, want %d, with %q in:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// restartFigures are what restartSpeakers saw.
type restartFigures struct {
	addr     netip.Prefix
	hops     []netip.Addr // the router's next hops before the restarts
	polls    int
	changes  []string
	sessions map[netip.Addr]dataplane.Session // when both were back
	back     time.Duration                    // from the signals until both were back
	// trafficEndedFirst: the lab's traffic ended before both sessions
	// were back.
	trafficEndedFirst bool
}

// restartSpeakers restarts both nodes' speakers at once, the two ways a
// speaker restarts: node 0's pod is deleted — the kubelet's SIGTERM, the
// graceful-restart hand-over, and the DaemonSet's new pod, as in an update
// of the speaker's DaemonSet (maxSurge 0) — and node 1's process is killed
// with SIGKILL, started again in place after the kubelet's back-off (10 s).
// It polls the router's kernel route for the Service's address every
// 100 ms from before the restarts until the traffic ends, and reads the
// sessions once both are Established again with the new speaker's
// End-of-RIB (the router then ends the restart, dropping what was not
// announced again).
func restartSpeakers(t *testing.T, ctx context.Context, lines *lineWatch, workDir string) (rs restartFigures) {
	t.Helper()
	router, vty, err := labRouter()
	if err != nil {
		t.Error(err)
		return rs
	}
	frr := dataplane.OpenFRR(vty)
	within := netip.MustParsePrefix(cluster.FrontendNet)
	routes, err := dataplane.NextHops(ctx, router, within)
	if err != nil {
		t.Error(err)
		return rs
	}
	for p, hops := range routes {
		if p.Bits() == 32 && len(hops) > len(rs.hops) {
			rs.addr, rs.hops = p, hops
		}
	}
	if !rs.addr.IsValid() || len(rs.hops) != 2 {
		t.Errorf("the router routes nothing in %s through both nodes: %v", within, routes)
		return rs
	}
	speakers, err := speakerProcesses(rs.hops)
	if err != nil || len(speakers) != 2 {
		t.Errorf("the speakers' processes: %v (%v)", speakers, err)
		return rs
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(workDir, "kubeconfig"))
	if err != nil {
		t.Error(err)
		return rs
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Error(err)
		return rs
	}
	hops := watchHops(ctx, router, rs.addr, rs.hops)
	defer func() {
		select {
		case <-lines.seen("traffic end"):
		case <-ctx.Done():
		}
		var changes []hopChange
		rs.polls, changes = hops.Stop()
		for _, c := range changes {
			rs.changes = append(rs.changes, c.String())
		}
	}()
	signalled := time.Now()
	killed, deleted := rs.hops[1], rs.hops[0]
	t.Logf("speaker of %s (pid %d): SIGKILL", killed, speakers[killed].pid)
	if err := syscall.Kill(speakers[killed].pid, syscall.SIGKILL); err != nil {
		t.Errorf("kill the speaker of %s: %v", killed, err)
		return rs
	}
	t.Logf("speaker of %s: pod %s deleted (SIGTERM)", deleted, speakers[deleted].pod)
	if err := client.CoreV1().Pods(world.ControllerNamespace).Delete(ctx, speakers[deleted].pod, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete the speaker pod of %s: %v", deleted, err)
		return rs
	}
	var last map[netip.Addr]dataplane.Session
	for ctx.Err() == nil {
		s, err := frr.Sessions(ctx)
		if err == nil && sessionsBack(s, rs.hops) {
			rs.back, rs.sessions = time.Since(signalled), s
			break
		}
		if err == nil {
			last = s
		}
		select {
		case <-lines.seen("traffic end"):
			rs.trafficEndedFirst = true
			t.Logf("the sessions when the traffic ended: %+v", last)
			return rs
		case <-time.After(200 * time.Millisecond):
		}
	}
	select {
	case <-lines.seen("traffic end"):
		rs.trafficEndedFirst = true
	default:
	}
	return rs
}

// sessionsBack: the sessions with hosts each dropped (at least once) and
// are Established again, the new speaker's End-of-RIB received.
func sessionsBack(s map[netip.Addr]dataplane.Session, hosts []netip.Addr) bool {
	for _, h := range hosts {
		// IPv4 unicast is the one family negotiated (its JSON key differs
		// between FRR's versions).
		if x := s[h]; x.State != "Established" || x.Dropped < 1 || !endOfRib(x) {
			return false
		}
	}
	return true
}

// endOfRib: the router has the session's End-of-RIB. IPv4 unicast is the
// one family negotiated (its JSON key differs between FRR's versions).
func endOfRib(s dataplane.Session) bool {
	return slices.Contains(slices.Collect(maps.Values(s.GR.EndOfRibRecv)), true)
}

// hopWatch polls the router's kernel route for one address every 100 ms
// (ip -j route show, ip -j nexthop show in its namespace) until Stop,
// noting each change of its next-hop set once, when it is first read (and
// so is the return to the set before), and every failed read.
type hopWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	last    []netip.Addr
	polls   int
	changes []hopChange
}

// hopChange is a change of the next-hop set, or a failed read, when it
// was read.
type hopChange struct {
	At   time.Time
	Hops []netip.Addr
	Err  error
}

func (c hopChange) String() string {
	if c.Err != nil {
		return fmt.Sprintf("%s: %v", c.At.Format("15:04:05.000"), c.Err)
	}
	return fmt.Sprintf("%s: %v", c.At.Format("15:04:05.000"), c.Hops)
}

// watchHops starts polling router (a namespace's name) for addr, whose
// next hops are hops before the first read.
func watchHops(ctx context.Context, router string, addr netip.Prefix, hops []netip.Addr) *hopWatch {
	w := &hopWatch{stop: make(chan struct{}), last: hops}
	w.wg.Go(func() {
		for {
			got, err := dataplane.NextHops(ctx, router, addr)
			w.mu.Lock()
			switch {
			case err != nil:
				w.changes = append(w.changes, hopChange{At: time.Now(), Err: err})
			case !slices.Equal(got[addr], w.last):
				w.last = got[addr]
				w.changes = append(w.changes, hopChange{At: time.Now(), Hops: got[addr]})
			}
			w.polls++
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return w
}

// until waits until the next-hop set last read satisfies ok, for at most
// within, and not past done or ctx's end: the set, when the poller first
// read it (the time of the change to it, or of the call when it was
// already so), and whether ok said so.
func (w *hopWatch) until(ctx context.Context, done <-chan struct{}, within time.Duration, ok func([]netip.Addr) bool) ([]netip.Addr, time.Time, bool) {
	called := time.Now()
	deadline := time.After(within)
	for {
		w.mu.Lock()
		last, n := w.last, len(w.changes)
		at := called
		for i := n - 1; i >= 0; i-- {
			if c := w.changes[i]; c.Err == nil {
				at = c.At
				break
			}
		}
		w.mu.Unlock()
		if ok(last) {
			if at.Before(called) {
				at = called
			}
			return last, at, true
		}
		select {
		case <-ctx.Done():
			return last, time.Now(), false
		case <-done:
			return last, time.Now(), false
		case <-deadline:
			return last, time.Now(), false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the polling: how often the route was read, and its changes.
func (w *hopWatch) Stop() (polls int, changes []hopChange) {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, slices.Clone(w.changes)
}

// labRouter finds this process's lab's router namespace and its FRR's vty
// directory (the only one whose bgpd's pid file names a live bgpd in that
// namespace).
func labRouter() (ns, vty string, err error) {
	mine := fmt.Sprintf("%s-%d-", netlab.NamePrefix, os.Getpid())
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return "", "", err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) && strings.HasSuffix(e.Name(), "-router") {
			ns = e.Name()
		}
	}
	if ns == "" {
		return "", "", fmt.Errorf("no router namespace %s*-router", mine)
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "zerodrop-lab-frr-*"))
	for _, d := range dirs {
		pid, err := readPid(filepath.Join(d, "bgpd.pid"))
		if err != nil {
			continue
		}
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && inNetns(link, ns) {
			return ns, d, nil
		}
	}
	return "", "", fmt.Errorf("no FRR of router namespace %s among %v", ns, dirs)
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// inNetns: link (a /proc/PID/ns/net target) is namespace name's.
func inNetns(link, name string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", name), &st); err != nil {
		return false
	}
	return link == fmt.Sprintf("net:[%d]", st.Ino)
}

// chartProc is a running process of a chart pod's container, and its pod.
type chartProc struct {
	pid int
	pod string
}

// speakerProcesses are the running `zerodrop speaker` processes of the
// lab's nodes hosts, by the node's address (one a node: the speaker's
// DaemonSet never surges).
func speakerProcesses(hosts []netip.Addr) (map[netip.Addr]chartProc, error) {
	procs, err := zerodropProcesses(hosts, func(args []string) bool { return args[1] == "speaker" })
	out := map[netip.Addr]chartProc{}
	for h, ps := range procs {
		out[h] = ps[0]
	}
	return out, err
}

// zerodropProcesses are the running processes of the zerodrop build on
// the lab's nodes hosts whose arguments match says so, by the node's
// address (their HOST_IP; their HOSTNAME is the pod's name, as the
// kubelet sets it), in the order of their process ids.
func zerodropProcesses(hosts []netip.Addr, match func(args []string) bool) (map[netip.Addr][]chartProc, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr][]chartProc{}
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != "zerodrop" || !match(args) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		if err != nil {
			continue
		}
		var cp chartProc
		var host netip.Addr
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "HOST_IP="); ok {
				host, _ = netip.ParseAddr(v)
			}
			if v, ok := strings.CutPrefix(kv, "HOSTNAME="); ok {
				cp.pod = v
			}
		}
		if slices.Contains(hosts, host) {
			cp.pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out[host] = append(out[host], cp)
		}
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b chartProc) int { return a.pid - b.pid })
	}
	return out, nil
}

// lineWatch is the lab's progress output, with a channel closed at the
// first line holding a marker.
type lineWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	markers map[string]chan struct{}
}

func newLineWatch() *lineWatch { return &lineWatch{markers: map[string]chan struct{}{}} }

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.partial = append(w.partial, p...)
	sc := bufio.NewScanner(bytes.NewReader(w.partial))
	for sc.Scan() {
		for m, ch := range w.markers {
			if strings.Contains(sc.Text(), m) {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}
	}
	if i := bytes.LastIndexByte(w.partial, '\n'); i >= 0 {
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// seen is closed once a line holding marker was written (also one
// written before).
func (w *lineWatch) seen(marker string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.markers[marker]
	if !ok {
		ch = make(chan struct{})
		w.markers[marker] = ch
		if strings.Contains(w.buf.String(), marker) {
			close(ch)
		}
	}
	return ch
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
