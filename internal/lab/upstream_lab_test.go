// The upstream service controller has a data race of its own (k8s.io/cloud-provider
// v0.37.2, controllers/service: processServiceCreateOrUpdate sets
// cachedService.state without the cache's lock, which allServices reads under
// it), so this test runs without the race detector: `make test` runs it in a
// second `go test` without -race.

//go:build !race

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLabUpstream runs the upstream mode: the real service controller of
// k8s.io/cloud-provider with the lab's Azure-like cloud, node-backed, on the
// real network. A rollout changes no node, so that controller writes nothing
// to the load balancer during it (counted at HAProxy's sockets), while the
// clients' traffic flows through it.
func TestLabUpstream(t *testing.T) {
	dir := t.TempDir()
	jsonPath, workDir := filepath.Join(dir, "lab.json"), filepath.Join(dir, "work")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"--scenario", "rollout", "--mode", "upstream", "--traffic-policy", "local",
		"--json", jsonPath, "--dir", workDir}, &stdout, &stderr)
	t.Logf("%s\n%s", stderr.String(), stdout.String())
	if code != 0 {
		logEvidence(t, filepath.Join(workDir, "lab.log"))
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
	if len(doc["scenarios"]) != 1 {
		t.Fatalf("want 1 run, got %s", raw)
	}
	s := doc["scenarios"][0]
	if s["mode"] != string(ModeUpstream) || s["backend"] != BackendNode || s["traffic_policy"] != PolicyLocal {
		t.Errorf("ran mode %v, backend %v, policy %v; want upstream, node (whatever --backend says), local", s["mode"], s["backend"], s["traffic_policy"])
	}
	if s["requests"].(float64) < 100 || s["provider_writes"].(float64) != 0 {
		t.Errorf("requests %v, writes during the rollout %v; want traffic and no write", s["requests"], s["provider_writes"])
	}
}
