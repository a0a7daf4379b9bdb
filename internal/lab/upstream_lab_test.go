// The upstream service controller has a data race of its own (k8s.io/cloud-provider
// v0.37.2, controllers/service: processServiceCreateOrUpdate sets
// cachedService.state without the cache's lock, which allServices reads under
// it), so this test runs without the race detector: `make test` runs it in a
// second `go test` without -race.

//go:build !race

package lab

import (
	"testing"
	"time"
)

// TestLabUpstream runs the upstream mode: the real service controller of
// k8s.io/cloud-provider with the lab's Azure-like cloud, node-backed, on the
// real network. A rollout changes no node, so that controller writes nothing
// to the load balancer during it (counted at HAProxy's sockets), while the
// clients' traffic flows through it.
func TestLabUpstream(t *testing.T) {
	doc := runLab(t, 4*time.Minute, "--scenario", "rollout", "--mode", "upstream", "--traffic-policy", "local")
	if len(doc) != 1 {
		t.Fatalf("want 1 run, got %v", doc)
	}
	s := doc[0]
	if s["mode"] != string(ModeUpstream) || s["backend"] != BackendNode || s["traffic_policy"] != PolicyLocal {
		t.Errorf("ran mode %v, backend %v, policy %v; want upstream, node (whatever --backend says), local", s["mode"], s["backend"], s["traffic_policy"])
	}
	if s["requests"].(float64) < 100 || s["provider_writes"].(float64) != 0 {
		t.Errorf("requests %v, writes during the rollout %v; want traffic and no write", s["requests"], s["provider_writes"])
	}
}
