package lab

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLabAzureRollout is the traffic lab's smoke test on emulated Azure: a
// rolling update in zerodrop mode with zerodrop's Azure provider writing the
// emulated load balancer, ARM's writes taking a few seconds, requests and
// WebSockets through the data plane that azuredp programs from it. zerodrop
// must lose nothing (a request late only by a stall of the lab process
// aside, as in TestLabRollout), and the rollout must have written to ARM.
func TestLabAzureRollout(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "lab.json")
	workDir := filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(interrupted, 6*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := Run(ctx, []string{"--provider", "azure-emulator", "--scenario", "rollout", "--mode", "zerodrop", "--arm-latency", "3s",
		"--json", jsonPath, "--html", filepath.Join(dir, "lab.html"), "--dir", workDir}, &stdout, &stderr)
	t.Logf("lab took %s\n%s\n%s", time.Since(start).Round(time.Second), stderr.String(), stdout.String())
	defer func() {
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
		}
	}()
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	rep, raw := readReport(t, jsonPath)
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run", raw)
	}
	r := rep.Scenarios[0]
	if r.AzureClock == nil || r.AzureClock.ARMLatencySeconds != 3 {
		t.Errorf("the run's clock %+v: want ARM latency 3 s", r.AzureClock)
	}
	if r.Requests < 100 || r.LongConns == 0 {
		t.Errorf("too little traffic: %s", raw)
	}
	if r.ProviderWrites == 0 {
		t.Errorf("the rollout made no ARM write: %s", raw)
	}
	if r.FailedRequests-r.RequestsLateStall != 0 || r.LongConnsBroken != 0 {
		t.Errorf("zerodrop lost traffic on emulated Azure: %d failed requests (%d late, %d of them by a client stall), %d broken long connections",
			r.FailedRequests, r.RequestsLate, r.RequestsLateStall, r.LongConnsBroken)
	}
}
