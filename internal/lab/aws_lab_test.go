package lab

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// awsLabEnv enables the lab tests on emulated AWS: `make test` runs every
// test of the package it does not skip by name, and whether it runs these
// (a control plane, the real aws-cloud-controller-manager, a traffic run)
// is the Makefile's choice, not this file's.
const awsLabEnv = "ZERODROP_LAB_AWS"

// TestLabAWSRollout is the traffic lab's smoke test on emulated AWS: a
// rolling update in upstream mode, externalTrafficPolicy Cluster, the real
// aws-cloud-controller-manager writing an NLB of instance targets into the
// emulator and the awsdp data plane forwarding the lab's traffic to the
// nodes, the emulator's registration delay and propagation scaled down.
// The Service's hostname must resolve to a frontend of the lab's pool and
// carry the traffic (most requests answered, WebSockets connected), the
// CCM's metadata client must make no call, and the record must name the
// CCM's release. Upstream may lose requests in a rollout: that is what the
// lab measures, not a failure.
//
//	ZERODROP_LAB_AWS=1 go test -count=1 -run TestLabAWSRollout ./internal/lab/
func TestLabAWSRollout(t *testing.T) {
	if os.Getenv(awsLabEnv) == "" {
		t.Skipf("set %s=1 to run the lab on emulated AWS", awsLabEnv)
	}
	r, raw := runAWSLab(t, "--mode", "upstream", "--traffic-policy", "cluster")
	a := r.AWS
	if a == nil {
		t.Fatalf("no AWS figures in %s", raw)
	}
	if a.LoadBalancer == "" || a.CCMRelease == "" {
		t.Errorf("the run's NLB %q, CCM release %q: want both named", a.LoadBalancer, a.CCMRelease)
	}
	if a.RegistrationDelaySeconds != 5 || a.PropagationSeconds != 5 {
		t.Errorf("the emulator's clocks %+v: want the flags' 5 s", a)
	}
	if a.MetadataConnections != 0 {
		t.Errorf("the CCM's metadata client made %d connections, want none", a.MetadataConnections)
	}
	ap, err := netip.ParseAddrPort(r.Frontend)
	if err != nil || !netip.MustParsePrefix(cluster.FrontendNet).Contains(ap.Addr()) {
		t.Errorf("frontend %q: want an address of the lab's frontend range %s (the NLB's hostname resolved)", r.Frontend, cluster.FrontendNet)
	}
	if r.Requests < 100 || r.Requests-r.FailedRequests < r.Requests/2 || r.LongConns == 0 {
		t.Errorf("too little traffic through the NLB: %d requests, %d failed, %d WebSockets", r.Requests, r.FailedRequests, r.LongConns)
	}
	t.Logf("rollout, upstream on emulated AWS: %d of %d requests failed, %d of %d WebSockets broken; act's writes %v, reads %d",
		r.FailedRequests, r.Requests, r.LongConnsBroken, r.LongConns, a.Writes, a.Reads)
}

// runAWSLab runs zerodrop lab on emulated AWS, one rollout with the
// emulator's registration delay and propagation scaled down to 5 s and
// args added, and returns its result and the report's JSON; a non-zero exit
// fails the test, with the lab's log.
func runAWSLab(t *testing.T, args ...string) (report.Result, []byte) {
	t.Helper()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "lab.json")
	workDir := filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(interrupted, 8*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := Run(ctx, append([]string{"--provider", "aws-emulator", "--scenario", "rollout", "--aws-registration-delay", "5s", "--aws-propagation", "5s",
		"--json", jsonPath, "--html", filepath.Join(dir, "lab.html"), "--dir", workDir}, args...), &stdout, &stderr)
	t.Logf("lab took %s\n%s\n%s", time.Since(start).Round(time.Second), stderr.String(), stdout.String())
	t.Cleanup(func() { // after the caller's checks too
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
		}
	})
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	rep, raw := readReport(t, jsonPath)
	if len(rep.Scenarios) != 1 {
		t.Fatalf("report %s: want one run", raw)
	}
	return rep.Scenarios[0], raw
}
