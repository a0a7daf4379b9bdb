package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/cmd/haproxyrun"
	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestMain lets the test binary stand in for the zerodrop binary: the lab
// starts its controllers as `<own executable> controller …` (zerodrop) or
// `<own executable> lab upstream-controller …` (upstream, recipe) with ChildEnv set,
// the drain relay sidecars of web pods as `<own executable> drain-relay …`,
// and the HAProxy of a data-plane replica of the lab's own arrangement as
// `<own executable> haproxy …`.
func TestMain(m *testing.M) {
	if os.Getenv(cluster.ChildEnv) == "controller" && len(os.Args) > 1 && os.Args[1] == "controller" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := controller.Run(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if os.Getenv(cluster.ChildEnv) == "sidecar" && len(os.Args) > 1 && os.Args[1] == "drain-relay" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := drainrelay.Run(ctx, os.Args[2:], os.Stderr)
		stop()
		os.Exit(code)
	}
	if os.Getenv(cluster.ChildEnv) == dataplane.HAProxyChild && len(os.Args) > 1 && os.Args[1] == "haproxy" {
		// A data-plane replica's `zerodrop haproxy` (which execs HAProxy)
		// and the validator it starts.
		os.Exit(haproxyrun.Run(os.Args[2:], os.Stderr))
	}
	if os.Getenv(cluster.ChildEnv) == "controller" && len(os.Args) > 2 && os.Args[1] == "lab" {
		os.Exit(Run(context.Background(), os.Args[2:], os.Stdout, os.Stderr))
	}
	// A lab run in a test tears down what it made (namespaces, links,
	// rules, processes) at the first SIGINT or SIGTERM, as the command does
	// at Ctrl-C; the default behaviour (exit at once) is back for a second.
	var stop context.CancelFunc
	interrupted, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-interrupted.Done()
		stop()
	}()
	os.Exit(m.Run())
}

// interrupted is the context the lab tests run the lab under: canceled at
// the test binary's first SIGINT or SIGTERM (TestMain).
var interrupted = context.Background()

// TestLabRollout is the lab's smoke test: the rollout scenario in zerodrop
// mode on the real control plane, HAProxy and loopback pods. The JSON report
// has the contract's shape and zerodrop loses nothing. (That the lab does
// count losses is TestLabUpstream's: its app exits at SIGTERM and breaks
// WebSockets.)
func TestLabRollout(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "lab.json"), filepath.Join(dir, "lab.html")
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	before := rootState(t)
	start := time.Now()
	workDir := filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	code := Run(ctx, []string{"--scenario", "rollout", "--mode", "zerodrop", "--json", jsonPath, "--html", htmlPath, "--dir", workDir}, &stdout, &stderr)
	t.Logf("lab took %s\n%s\n%s", time.Since(start).Round(time.Second), stderr.String(), stdout.String())
	defer func() {
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
		}
	}()
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
	var doc map[string][]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, raw)
	}
	if len(doc) != 1 || len(doc["scenarios"]) != 1 {
		t.Fatalf("JSON report: want only the key \"scenarios\" with one run, got %s", raw)
	}
	fields := []string{"scenario", "mode", "backend", "external_traffic_policy", "frontend", "client_netns", "traffic_start", "traffic_end",
		"requests", "failed_requests", "requests_late", "requests_late_client_stall", "long_conns", "long_conns_closed", "long_conns_broken",
		"long_reconnect_p50_ms", "long_reconnect_max_ms", "provider_writes", "controller_reported_writes", "provider_conflicts", "hook_failures", "drain_relay_retries",
		"drain_drained", "drain_deadline", "duplicate_backend_samples", "rollout_seconds", "duration_seconds"}
	s := doc["scenarios"][0]
	var keys []string
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := slices.Clone(fields)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("scenario entry keys %v, want %v", keys, want)
	}
	for _, f := range fields[8:] {
		if _, ok := s[f].(float64); !ok {
			t.Errorf("%s is %T, want a number", f, s[f])
		}
	}
	for _, f := range []string{"traffic_start", "traffic_end"} {
		if v, _ := s[f].(string); !rfc3339ms.MatchString(v) {
			t.Errorf("%s is %q, want RFC 3339 with milliseconds", f, v)
		}
	}
	fe, _ := s["frontend"].(string)
	netns, _ := s["client_netns"].(string)
	if !strings.Contains(stderr.String(), "frontend="+fe+" netns="+netns) || fe == "" || netns == "" {
		t.Errorf("frontend %q and client namespace %q not printed as frontend=ADDR:PORT netns=NAME on stderr", fe, netns)
	}
	if s["scenario"] != "rollout" || s["mode"] != string(report.ModeZerodrop) || s["backend"] != scenarios.BackendIP || s["external_traffic_policy"] != scenarios.PolicyCluster {
		t.Errorf("ran %v in mode %v, backend %v, policy %v: want rollout, zerodrop and the defaults ip and cluster",
			s["scenario"], s["mode"], s["backend"], s["external_traffic_policy"])
	}
	if s["requests"].(float64) < 100 || s["long_conns"].(float64) < traffic.LongConns {
		t.Errorf("too little traffic: %s", raw)
	}
	if r := s["rollout_seconds"].(float64); r <= 0 || r > s["duration_seconds"].(float64) {
		t.Errorf("rollout_seconds %v: want the time from the rollout's start to steady, within the run's %v s", r, s["duration_seconds"])
	}
	// zerodrop must lose nothing: no failed request, late ones included, and
	// no broken long connection. The one exception is a request late
	// because the lab process itself stalled (its worker was waiting for the
	// slot in time and woke too late: with -race on a loaded 2-core machine
	// the whole process can stop for 100 ms; nothing between client and pod
	// is involved before the dial). The report counts those as late and
	// failed all the same; the test does not blame zerodrop for them, and
	// says so.
	failed, stalled := s["failed_requests"].(float64), s["requests_late_client_stall"].(float64)
	if failed-stalled != 0 || s["long_conns_broken"].(float64) != 0 {
		t.Errorf("zerodrop mode lost traffic: %v failed requests (%v late, %v of them by a client stall), %v broken long connections (see the log above)",
			failed, s["requests_late"], stalled, s["long_conns_broken"])
	}
	// Every replaced pod's preStop drain call answered drained, none at its
	// deadline.
	if s["drain_deadline"].(float64) != 0 || s["drain_drained"].(float64) < 3 {
		t.Errorf("zerodrop: drain calls answered drained %v, at their deadline %v; want every one of the 3 replaced pods drained",
			s["drain_drained"], s["drain_deadline"])
	}
	if stalled > 0 {
		t.Logf("zerodrop: %v requests late by a stall of the lab process (counted as failed in the report, not blamed on zerodrop here)", stalled)
	}
	if !strings.Contains(stdout.String(), "rollout cluster") || !strings.Contains(stdout.String(), "zerodrop/ip") {
		t.Errorf("no table with the row \"rollout cluster\" and the column zerodrop/ip:\n%s", stdout.String())
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<svg"); n != 1 {
		t.Errorf("HTML report has %d timelines, want 1", n)
	}
}

// TestLabInterruptLeavesNothing is Ctrl-C (the command's context ends, as
// SIGINT does through signal.NotifyContext) while traffic flows: Run returns
// and the network namespaces, every process the lab started and the root
// namespace's links, routes, nftables ruleset and sysctls are as before.
func TestLabInterruptLeavesNothing(t *testing.T) {
	before := rootState(t)
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	stderr := &cancelOn{marker: "traffic start", cancel: cancel}
	var stdout bytes.Buffer
	code := Run(ctx, []string{"--scenario", "rollout", "--mode", "zerodrop", "--dir", t.TempDir()}, &stdout, stderr)
	t.Logf("zerodrop lab exited %d\n%s", code, stderr.String())
	if !stderr.seen() {
		t.Fatalf("the lab never started its traffic")
	}
	if code == 0 {
		t.Errorf("an interrupted lab exited 0")
	}
	if d := cmp.Diff(before, rootState(t)); d != "" {
		t.Errorf("the interrupted lab left something behind (-before +after):\n%s", d)
	}
}

func rootState(t *testing.T) map[string]string {
	t.Helper()
	s, err := testutil.RootState(netlab.NamePrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cancelOn is a progress writer that cancels once a line contains marker.
type cancelOn struct {
	marker string
	cancel context.CancelFunc
	mu     sync.Mutex
	buf    bytes.Buffer
	hit    bool
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if !c.hit && strings.Contains(c.buf.String(), c.marker) {
		c.hit = true
		c.cancel()
	}
	return len(p), nil
}

func (c *cancelOn) seen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

var rfc3339ms = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// evidenceMarks pick the lab log's lines logEvidence shows: the hooks,
// failures and the rollout's start, and the data plane's programming and
// health checks (emulated clouds), each pod's stop and the steady mark,
// which tell where a failed request went.
var evidenceMarks = []string{"preStop", " failed", "s request ", "s long ", ": rollout at",
	"dp: programmed", "health check", " stopped (exit", "steady"}

// logEvidence shows what the lab log says about hooks and failures.
func logEvidence(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	var lines []string
	for _, line := range strings.Split(string(raw), "\n") {
		if slices.ContainsFunc(evidenceMarks, func(m string) bool { return strings.Contains(line, m) }) {
			lines = append(lines, line)
		}
	}
	t.Logf("from %s:\n%s", path, strings.Join(lines, "\n"))
}

// logTail logs the end of the lab's log in workDir (its progress, not the
// traffic's lines) and the error lines of the controller pods' logs, so that
// a failed run can be read from the test's output alone.
func logTail(t *testing.T, workDir string) {
	raw, err := os.ReadFile(filepath.Join(workDir, "lab.log"))
	if err != nil {
		t.Log(err)
		return
	}
	var lines []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, " klog ") && !strings.Contains(line, "s request ") && !strings.Contains(line, "s long ") {
			lines = append(lines, line)
		}
	}
	t.Logf("the lab log's last lines:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
	logs, _ := filepath.Glob(filepath.Join(workDir, "zerodrop-system_*.log"))
	for _, f := range logs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var errs, plans []string
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "E") || strings.Contains(line, `"level":"error"`) {
				errs = append(errs, line)
			}
			if strings.Contains(line, `"applying plan"`) {
				plans = append(plans, line)
			}
		}
		if len(errs) > 0 {
			t.Logf("%s: %d error lines, the first:\n%s", filepath.Base(f), len(errs), strings.Join(errs[:min(10, len(errs))], "\n"))
		}
		// What it wrote, to tell a write the test did not expect.
		if len(plans) > 0 {
			t.Logf("%s: %d plans applied, the last:\n%s", filepath.Base(f), len(plans), strings.Join(plans[max(0, len(plans)-10):], "\n"))
		}
	}
}
