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
)

// TestAzureRestartIdle runs restart-idle short on emulated Azure with
// traffic: the writer stopped twice (SIGKILL, then SIGTERM) with 4 other
// Services beside the workload's (half Local), once as the real
// cloud-provider-azure (upstream) and once as zerodrop. zerodrop writes
// nothing on either restart and loses nothing; each restart of each
// writer is measured from the emulator's record, with what its writes
// removed or changed; the CCM's reads are in the record.
func TestAzureRestartIdle(t *testing.T) {
	rep, raw := runAzureLab(t, "--scenario", "restart-idle", "--mode", "upstream,zerodrop", "--idle-restarts", "2",
		"--azure-services", "4", "--arm-latency", "0s")
	if len(rep.Scenarios) != 2 {
		t.Fatalf("report %s: want upstream and zerodrop", raw)
	}
	for _, r := range rep.Scenarios {
		a := r.Azure
		if a.Restarts != 2 || len(a.Stops) != 2 || a.Stops[0] != "SIGKILL" || a.Stops[1] != "SIGTERM" ||
			len(r.WritesPerRestart) != 2 || len(a.RemovedBackendsPerRestart) != 2 || len(a.ProbeRuleChangesPerRestart) != 2 {
			t.Errorf("%s: %+v, writes per restart %v: want two restarts, SIGKILL then SIGTERM, each measured", r.Mode, a, r.WritesPerRestart)
		}
		if r.Mode == string(report.ModeUpstream) && a.Gets == 0 {
			t.Errorf("upstream: no read of the CCM's in the record: %+v", a)
		}
		if r.Mode == string(report.ModeZerodrop) && (r.ProviderWrites != 0 || a.ConflictsSurfaced != 0) {
			t.Errorf("zerodrop: %d writes on idle restarts %v, %d conflicts surfaced; want none", r.ProviderWrites, r.WritesPerRestart, a.ConflictsSurfaced)
		}
	}
}

// TestAzureKillsUnderFaults: with 20 % of ARM requests failing (412s,
// 429s, 500s, slow answers), zerodrop's leader on emulated Azure is
// SIGKILLed inside its first write of a plan, twice, during rolling
// updates (kill-mid-plan). zerodrop loses no traffic (the lab fails the run
// otherwise), each kill is counted, and the faults are retried where they
// happen: no Warning Event on a Service.
func TestAzureKillsUnderFaults(t *testing.T) {
	rep, raw := runAzureLab(t, "--scenario", "kill-mid-plan", "--mode", "zerodrop", "--kills", "2",
		"--azure-fault-rate", "0.2", "--arm-latency", "0s")
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run", raw)
	}
	r := rep.Scenarios[0]
	if r.Azure.Restarts != 2 || len(r.WritesPerRestart) != 2 || len(r.Azure.Stops) != 2 {
		t.Errorf("%d kills, writes per kill %v, stops %v; want 2, each counted", r.Azure.Restarts, r.WritesPerRestart, r.Azure.Stops)
	}
	if r.Azure.Faults == 0 {
		t.Errorf("no fault injected: %+v", r.Azure)
	}
	if r.Azure.WarningEvents != 0 {
		t.Errorf("%d Warning Events for %d transient faults, want none", r.Azure.WarningEvents, r.Azure.Faults)
	}
}

// TestAzureEmulatorLabUsage: a scenario the world does not run, the
// HAProxy data plane's flags, clocks that are not lists of durations of 0
// or more, and the world's options out of range are usage errors that
// name the provider or the flag.
func TestAzureEmulatorLabUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--provider", "azure-emulator", "--scenario", "rollout,apiserver-down"},
		{"--provider", "azure-emulator", "--scenario", "drain-node", "--data-plane-replicas", "2"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--arm-latency", "-1s"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--lb-propagation", "0s,0s"},
		{"--provider", "azure-emulator", "--scenario", "rollout", "--health-lag", "soon"},
		{"--provider", "azure-emulator", "--scenario", "churn", "--azure-fault-rate", "1.5"},
		{"--provider", "azure-emulator", "--scenario", "churn", "--azure-services", "-1"},
		{"--provider", "azure-emulator", "--scenario", "restart-idle", "--azure-idle-change", "node-joins"},
		{"--provider", "azure-emulator", "--scenario", "restart-idle", "--azure-idle-change", "pool-drift"}, // nodeip pools
		{"--provider", "azure-emulator", "--scenario", "restart", "--azure-ccm-lbs", "three"},
		{"--provider", "azure-emulator", "--scenario", "restart", "--azure-shared-lb", "--azure-ccm-lbs", "multiple"},
		{"--provider", "azure-emulator", "--scenario", "maintenance", "--azure-ccm-version", "1.33"},
		{"--provider", "azure-emulator", "--scenario", "maintenance", "--maintenance-signal", "cordon"},
		{"--provider", "gce"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), append(args, "--dry-run"), &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", args, code, stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, "provider") && !strings.Contains(msg, "--") {
			t.Errorf("%v: the message names neither the provider nor the flag: %s", args, msg)
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

// TestAzureSharedLB: zerodrop beside the real cloud-provider-azure on the
// CCM's internal load balancer (--azure-shared-lb), 4 other Services the
// CCM's, through the churn (the workload scaled and its Service changed;
// the other Services' endpoints moved between nodes while Services are
// created and given or relieved of a second port): both writers write the
// one load balancer, neither removes a child of the other's (the lab fails
// the run otherwise), the churn's changes are counted, and no Warning
// Event is recorded on zerodrop's Service.
func TestAzureSharedLB(t *testing.T) {
	rep, raw := runAzureLab(t, "--scenario", "churn", "--mode", "zerodrop", "--azure-shared-lb", "--azure-services", "4", "--arm-latency", "0s")
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run", raw)
	}
	a := rep.Scenarios[0].Azure
	ws := a.Writers
	if len(ws) != 2 || ws[0].Writes == 0 || ws[1].Writes == 0 {
		t.Fatalf("writers %+v: want zerodrop and the CCM, each with writes of its own", ws)
	}
	if a.Changes == 0 || ws[0].WarningEvents != 0 {
		t.Errorf("%d changes of the other Services, %d Warning Events on zerodrop's Service: want churn, and no Warning Event", a.Changes, ws[0].WarningEvents)
	}
}
