package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azurewrites"
)

// TestAzureEmulatorLab runs the emulator lab (as `zerodrop lab --provider
// azure-emulator` does; the CLI's path is TestAzureEmulatorLabFaults' and
// TestAzureEmulatorKillMidPlan's) for restart and churn in both modes on
// the real apiserver and the ARM emulator, both writers on its HTTPS endpoint: zerodrop writes nothing on
// restart and surfaces no conflict, and it makes no 412 at all (one writer
// per load balancer); upstream is the real cloud-provider-azure, restarted
// twice, its calls counted from the emulator's record (its reads are
// there: the count sees the CCM). Churn (node-backed Services, half Local,
// their endpoints moving between nodes while Services are created and
// moved) runs both: zerodrop's must end with no Warning Event and no error
// log line, upstream's is measured.
func TestAzureEmulatorLab(t *testing.T) {
	// Two restarts (the lab's default is scenarios.DefaultRestarts, 3):
	// zerodrop's 0 writes and upstream's writes counted per restart are
	// seen as well over two, and each of upstream's restarts is ~18 s here.
	const restarts = 2
	ctx, cancel := context.WithTimeout(interrupted, 10*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := azurewrites.ExecuteAzure(ctx, azurewrites.AzureOptions{
		Scenarios: []string{"restart", azurewrites.ScenarioChurn}, Modes: []report.Mode{report.ModeUpstream, report.ModeZerodrop},
		Restarts: restarts, Progress: &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]report.Result{}
	for _, r := range res {
		if r.Err != nil || r.Azure == nil {
			t.Fatalf("%s/%s: %v (azure figures %+v)", r.Scenario, r.Mode, r.Err, r.Azure)
		}
		got[r.Scenario+"/"+r.Mode] = r
	}
	for _, k := range []string{"restart/upstream", "restart/zerodrop", "churn/upstream", "churn/zerodrop"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("no result for %s: %+v", k, res)
		}
	}
	if r := got["restart/zerodrop"]; r.ProviderWrites != 0 || r.Azure.Restarts != restarts {
		t.Errorf("zerodrop restart: %d writes over %d restarts, want 0 over %d", r.ProviderWrites, r.Azure.Restarts, restarts)
	}
	if r := got["restart/upstream"]; r.Azure.Restarts != restarts || len(r.WritesPerRestart) != restarts || r.Azure.Gets == 0 {
		t.Errorf("upstream restart: %d restarts, writes per restart %v, %d reads; want %d restarts each counted, and the CCM's reads seen",
			r.Azure.Restarts, r.WritesPerRestart, r.Azure.Gets, restarts)
	}
	for _, k := range []string{"restart/zerodrop", "churn/zerodrop"} {
		r := got[k]
		if r.Azure.ConflictsSurfaced != 0 || r.ProviderConflicts != 0 {
			t.Errorf("%s: %d 412s, %d conflicts surfaced; want none with one writer per load balancer", k, r.ProviderConflicts, r.Azure.ConflictsSurfaced)
		}
	}
	for _, k := range []string{"churn/upstream", "churn/zerodrop"} {
		if r := got[k]; r.Azure.Changes == 0 || r.ProviderWrites == 0 || r.Azure.WritesChanged == 0 {
			t.Errorf("%s made %d changes and %d writes (%d changed something): nothing was churned",
				k, r.Azure.Changes, r.ProviderWrites, r.Azure.WritesChanged)
		}
	}
	if a := got["churn/zerodrop"].Azure; a.WarningEvents != 0 || a.ErrorLogLines != 0 {
		t.Errorf("zerodrop churn: %d Warning Events and %d error log lines, want none", a.WarningEvents, a.ErrorLogLines)
	}
}

// TestAzureEmulatorLabFaults: with 20 % of ARM requests failing (412s, 429s,
// 500s, slow answers) during the churn, zerodrop still converges — the run
// fails otherwise: every load balancer holds exactly what the Services ask
// for, no backend lost — and records no Warning Event: the faults are
// transient.
func TestAzureEmulatorLabFaults(t *testing.T) {
	rep, raw := runAzureLab(t, "--scenario", "churn", "--mode", "zerodrop", "--azure-fault-rate", "0.2")
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run", raw)
	}
	a := rep.Scenarios[0].Azure
	if a.Faults == 0 {
		t.Errorf("no fault injected: %+v", a)
	}
	if a.WarningEvents != 0 {
		t.Errorf("%d Warning Events for %d transient faults, want none", a.WarningEvents, a.Faults)
	}
}

// TestAzureEmulatorLabUsage: a traffic scenario beside one of the emulator
// lab's, a scenario neither runs, the HAProxy data plane's flags, clocks
// that are not lists of durations of 0 or more, and the emulator lab's
// own misuses are usage errors that name the provider or the flag.
func TestAzureEmulatorLabUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--provider", "azure-emulator", "--scenario", "rollout,churn"},
		{"--provider", "azure-emulator", "--scenario", "rollout,apiserver-down"},
		{"--provider", "azure-emulator", "--scenario", "drain-node", "--data-plane-replicas", "2"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--arm-latency", "-1s"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--lb-propagation", "0s,0s"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--health-lag", "soon"},
		{"--provider", "azure-emulator", "--scenario", "churn", "--html", "x.html"},
		{"--provider", "azure-emulator", "--scenario", "restart", "--mode", "recipe"},
		{"--provider", "azure-emulator", "--scenario", "churn", "--azure-fault-rate", "1.5"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--azure-fault-rate", "0.2"},
		{"--provider", "gce"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", args, code, stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, "provider") && !strings.Contains(msg, "--") {
			t.Errorf("%v: the message names neither the provider nor the flag: %s", args, msg)
		}
	}
}

// TestAzureEmulatorKillMidPlan: the leader's process SIGKILLed inside its
// first PUT of a plan, its lease held, twice: each time a new leader takes
// over, its writes are what the diff at takeover calls for and the load
// balancers end up holding exactly what the Services ask for (the lab fails
// the run otherwise), with no Warning Event.
func TestAzureEmulatorKillMidPlan(t *testing.T) {
	rep, raw := runAzureLab(t, "--scenario", "kill-mid-plan", "--mode", "all", "--kills", "2")
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run (kill-mid-plan runs in zerodrop mode only)", raw)
	}
	r := rep.Scenarios[0]
	if r.Mode != string(report.ModeZerodrop) || r.Azure.Restarts != 2 || len(r.WritesPerRestart) != 2 {
		t.Errorf("mode %s, %d kills, PUTs per kill %v; want zerodrop, 2, 2 entries", r.Mode, r.Azure.Restarts, r.WritesPerRestart)
	}
	if r.Azure.WarningEvents != 0 {
		t.Errorf("%d Warning Events, want none", r.Azure.WarningEvents)
	}
	// The lab fails a kill whose writes fall outside what the diff called
	// for; here only that each kill was measured.
	if len(r.Azure.WritesLanded) != 2 || len(r.Azure.WritesCalledFor) != 2 {
		t.Errorf("writes landed %v, called for %v: want one entry per kill", r.Azure.WritesLanded, r.Azure.WritesCalledFor)
	}
}

// TestAzureRestartIdle runs restart-idle, short (6 Services, the writer
// stopped twice: SIGKILL, then SIGTERM), with upstream (the real
// cloud-provider-azure) and zerodrop on the emulator: zerodrop writes
// nothing on either restart; each restart of each writer is measured from
// the emulator's record, with what its writes removed or changed.
func TestAzureRestartIdle(t *testing.T) {
	exe, err := os.Executable() // this test binary: TestMain runs `lab azure-controller`
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	res, err := azurewrites.ExecuteAzure(interrupted, azurewrites.AzureOptions{
		Scenarios: []string{azurewrites.ScenarioRestartIdle}, Modes: []report.Mode{report.ModeUpstream, report.ModeZerodrop},
		IdleServices: 6, IdleRestarts: 2, Executable: exe, Progress: &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want upstream and zerodrop", len(res))
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Mode, r.Err)
		}
		a := r.Azure
		if a.Restarts != 2 || len(a.Stops) != 2 || a.Stops[0] != "SIGKILL" || a.Stops[1] != "SIGTERM" ||
			len(r.WritesPerRestart) != 2 || len(a.RemovedBackendsPerRestart) != 2 || len(a.ProbeRuleChangesPerRestart) != 2 {
			t.Errorf("%s: %+v, writes per restart %v: want two restarts, SIGKILL then SIGTERM, each measured", r.Mode, a, r.WritesPerRestart)
		}
		if r.Mode == string(report.ModeZerodrop) && r.ProviderWrites != 0 {
			t.Errorf("zerodrop: %d writes on idle restarts %v, want none", r.ProviderWrites, r.WritesPerRestart)
		}
	}
}

// runAzureLab runs `zerodrop lab --provider azure-emulator` with args and a
// JSON report, logs what it printed, fails the test if the lab exits
// non-zero or a run has no Azure figures, and returns the report and its
// text.
func runAzureLab(t *testing.T, args ...string) (report.Report, []byte) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "lab.json")
	ctx, cancel := context.WithTimeout(interrupted, 10*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := Run(ctx, append([]string{"--provider", "azure-emulator", "--json", jsonPath}, args...), &stdout, &stderr)
	t.Logf("lab took %s\n%s\n%s", time.Since(start).Round(time.Second), stderr.String(), stdout.String())
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	rep, raw := readReport(t, jsonPath)
	for _, r := range rep.Scenarios {
		if r.Azure == nil {
			t.Fatalf("%s/%s has no azure figures: %s", r.Scenario, r.Mode, raw)
		}
	}
	return rep, raw
}

// readReport reads and decodes the lab's JSON report at path.
func readReport(t *testing.T, path string) (report.Report, []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("report %s: %v", raw, err)
	}
	return rep, raw
}
