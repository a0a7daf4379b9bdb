package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLabNodeMode is the node-mode gates on the real network: HAProxy sends
// to node IP:nodePort and the real kube-proxy forwards. With
// externalTrafficPolicy Local, rollout-local replaces a node's last pod by
// one on another node: the new node is enabled when its pod appears and must
// pass its health check (the health-check node port) before the old node is
// drained, and the old node is drained before its pod stops; scale-down stops
// the last pods of two nodes. With Cluster, scale-down's drain calls wait for
// every node's kube-proxy (/healthz) after the EndpointSlice change. zerodrop
// must lose nothing, and every drain call must answer drained, none at its
// deadline.
func TestLabNodeMode(t *testing.T) {
	doc := runLab(t, 5*time.Minute, "--scenario", "rollout-local,scale-down", "--mode", "zerodrop", "--backend", "node",
		"--traffic-policy", "both")
	var runs []string
	for _, s := range doc {
		name := fmt.Sprint(s["scenario"], " ", s["backend"], "/", s["external_traffic_policy"])
		runs = append(runs, name)
		// A request late only because the lab process stalled is not
		// zerodrop's (see TestLabRollout).
		failed, stalled := s["failed_requests"].(float64), s["requests_late_client_stall"].(float64)
		if failed-stalled != 0 || s["long_conns_broken"].(float64) != 0 {
			t.Errorf("%v: zerodrop lost traffic in node mode: %v failed requests (%v by a client stall), %v broken long connections",
				name, failed, stalled, s["long_conns_broken"])
		}
		if s["drain_deadline"].(float64) != 0 || s["drain_drained"].(float64) < 1 {
			t.Errorf("%v: drain calls answered drained %v, at their deadline %v; want every one drained",
				name, s["drain_drained"], s["drain_deadline"])
		}
	}
	if want := []string{"rollout-local node/local", "scale-down node/cluster", "scale-down node/local"}; !slices.Equal(runs, want) {
		t.Errorf("runs %v, want %v", runs, want)
	}
}

// runLab runs `zerodrop lab` with args and a JSON report, logs what it
// printed (and, when the test fails, the lab's log), fails the test if the
// lab exits non-zero, and returns the report's scenario entries.
func runLab(t *testing.T, timeout time.Duration, args ...string) []map[string]any {
	t.Helper()
	dir := t.TempDir()
	jsonPath, workDir := filepath.Join(dir, "lab.json"), filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(interrupted, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Run(ctx, append(args, "--json", jsonPath, "--dir", workDir), &stdout, &stderr)
	t.Logf("%s\n%s", stderr.String(), stdout.String())
	t.Cleanup(func() {
		if t.Failed() {
			logEvidence(t, filepath.Join(workDir, "lab.log"))
			logTail(t, workDir)
		}
	})
	if code != 0 {
		t.Fatalf("zerodrop lab exited %d", code)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc["scenarios"]
}
