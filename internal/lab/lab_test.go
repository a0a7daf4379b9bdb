package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// TestMain lets the test binary stand in for the zerodrop binary: the lab
// starts its controllers as `<own executable> controller …` with ChildEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(ChildEnv) == "controller" && len(os.Args) > 1 && os.Args[1] == "controller" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := controller.Run(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestLabRollout is the lab's smoke test: the rollout scenario in both modes
// on the real control plane, HAProxy and loopback pods. The JSON report has
// the contract's shape, the baseline loses traffic and zerodrop loses nothing.
func TestLabRollout(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "lab.json"), filepath.Join(dir, "lab.html")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	before := rootState(t)
	start := time.Now()
	workDir := filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	code := Run(ctx, []string{"--scenario", "rollout", "--mode", "both", "--json", jsonPath, "--html", htmlPath, "--dir", workDir}, &stdout, &stderr)
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
	if len(doc) != 1 || doc["scenarios"] == nil {
		t.Fatalf("JSON report: want only the key \"scenarios\", got %s", raw)
	}
	fields := []string{"scenario", "mode", "backend", "traffic_policy", "frontend", "client_netns", "traffic_start", "traffic_end",
		"requests", "failed_requests", "requests_late", "requests_late_client_stall", "long_conns", "long_conns_closed", "long_conns_broken",
		"long_reconnect_p50_ms", "long_reconnect_max_ms", "provider_writes", "controller_reported_writes", "provider_conflicts", "hook_failures", "drain_drained", "drain_deadline", "duration_seconds"}
	var modes []string
	var baselineLoss float64
	for _, s := range doc["scenarios"] {
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
		if s["backend"] != BackendIP || s["traffic_policy"] != PolicyCluster {
			t.Errorf("backend %v, traffic policy %v: want the defaults ip and cluster", s["backend"], s["traffic_policy"])
		}
		if s["scenario"] != "rollout" {
			t.Errorf("scenario %v, want rollout", s["scenario"])
		}
		mode, _ := s["mode"].(string)
		modes = append(modes, mode)
		if mode == string(ModeBaseline) {
			baselineLoss = loss(s)
		}
		if s["requests"].(float64) < 100 || s["long_conns"].(float64) < longConns {
			t.Errorf("%s: too little traffic: %s", mode, raw)
		}
		// zerodrop must lose nothing: no failed request, late ones
		// included, and no broken long connection. The one exception is a
		// request late because the lab process itself stalled (its worker
		// was waiting for the slot in time and woke too late: with -race
		// on a loaded 2-core machine the whole process can stop for 100 ms;
		// nothing between client and pod is involved before the dial). The
		// report counts those as late and failed all the same; the test
		// does not blame zerodrop for them, and says so.
		if mode == string(ModeZerodrop) {
			failed, stalled := s["failed_requests"].(float64), s["requests_late_client_stall"].(float64)
			if failed-stalled != 0 || s["long_conns_broken"].(float64) != 0 {
				t.Errorf("zerodrop mode lost traffic: %v failed requests (%v late, %v of them by a client stall), %v broken long connections (see the log above)",
					failed, s["requests_late"], stalled, s["long_conns_broken"])
			}
			// Every replaced pod's preStop drain call answered drained,
			// none at its deadline.
			if s["drain_deadline"].(float64) != 0 || s["drain_drained"].(float64) < 3 {
				t.Errorf("zerodrop: drain calls answered drained %v, at their deadline %v; want every one of the 3 replaced pods drained",
					s["drain_drained"], s["drain_deadline"])
			}
			if stalled > 0 {
				t.Logf("zerodrop: %v requests late by a stall of the lab process (counted as failed in the report, not blamed on zerodrop here)", stalled)
			}
		}
	}
	if !slices.Equal(modes, []string{"baseline", "zerodrop"}) {
		t.Errorf("modes %v, want [baseline zerodrop]", modes)
	}
	// The baseline must lose what zerodrop keeps, or a failure counter stuck
	// at 0 would pass the zerodrop check above. Its loss is a race: a pod
	// closes its listener on SIGTERM at once, while HAProxy sends it new
	// connections (every request session, and every long client the pod's
	// shutdown disconnected) until the EndpointSlice change has gone through
	// kube-controller-manager and the baseline controller's full-sync write.
	// Failed requests and broken long connections are summed, and a run that
	// lost nothing is run again: a stuck counter gives 0 every time, a lucky
	// race does not three times in a row (docs/lab.md's rollout: 3 + 4).
	for try := 2; baselineLoss == 0 && try <= 3; try++ {
		t.Logf("the baseline lost nothing; running it again (%d of 3)", try)
		baselineLoss = runBaseline(t, filepath.Join(dir, fmt.Sprint("baseline-", try)))
	}
	if baselineLoss == 0 {
		t.Errorf("the baseline lost no request and broke no long connection in 3 rollouts: are failures counted?")
	}
	if !strings.Contains(stdout.String(), "rollout") || !strings.Contains(stdout.String(), "baseline | zerodrop") {
		t.Errorf("no side-by-side table:\n%s", stdout.String())
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<svg"); n != 2 {
		t.Errorf("HTML report has %d timelines, want 2", n)
	}
}

// TestLabInterruptLeavesNothing is Ctrl-C (the command's context ends, as
// SIGINT does through signal.NotifyContext) while traffic flows: Run returns
// and the network namespaces, every process the lab started and the root
// namespace's links, routes, nftables ruleset and sysctls are as before.
func TestLabInterruptLeavesNothing(t *testing.T) {
	before := rootState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
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
	s, err := netlab.RootState()
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

// loss is a report entry's failed requests plus broken long connections.
func loss(s map[string]any) float64 {
	failed, _ := s["failed_requests"].(float64)
	broken, _ := s["long_conns_broken"].(float64)
	return failed + broken
}

// runBaseline runs the rollout in baseline mode alone and returns its loss.
func runBaseline(t *testing.T, dir string) float64 {
	t.Helper()
	workDir := filepath.Join(dir, "work")
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(dir, "lab.json")
	var stdout, stderr bytes.Buffer
	if code := Run(ctx, []string{"--scenario", "rollout", "--mode", "baseline", "--json", jsonPath, "--dir", workDir}, &stdout, &stderr); code != 0 {
		t.Fatalf("zerodrop lab --mode baseline exited %d\n%s", code, stderr.String())
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc["scenarios"]) != 1 {
		t.Fatalf("JSON report: %v\n%s", err, raw)
	}
	return loss(doc["scenarios"][0])
}

// logEvidence shows what the lab log says about hooks and failures.
func logEvidence(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	var lines []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "preStop") || strings.Contains(line, " failed") || strings.Contains(line, "s request ") ||
			strings.Contains(line, "s long ") || strings.Contains(line, ": rollout at") {
			lines = append(lines, line)
		}
	}
	t.Logf("from %s:\n%s", path, strings.Join(lines, "\n"))
}
