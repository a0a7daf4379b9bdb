// The upstream service controller has a data race of its own (k8s.io/cloud-provider
// v0.37.2, controllers/service: processServiceCreateOrUpdate sets
// cachedService.state without the cache's lock, which allServices reads under
// it), so this test runs without the race detector: `make test` runs it in a
// second `go test` without -race.

//go:build !race

package lab

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
)

// TestLabUpstream runs the upstream mode: the real service controller of
// k8s.io/cloud-provider, in cloud-controller-manager processes with the lab's
// Azure-like cloud, node-backed, on the real network.
//
// It is also the check that the lab's failure counters count at all
// end to end, which zerodrop's 0s elsewhere rely on. With the lab's
// graceful app, whether a rollout under upstream loses a request is a race
// (the pod stops accepting at SIGTERM while kube-proxy may still send it new
// connections), lost by a few requests or by none: no test can ask for it.
// So the app here has no SIGTERM handling (--app-sigterm exit): every old
// pod, each holding some of the WebSockets opened before the rollout, exits
// at SIGTERM without a close frame, and every WebSocket on it must count as
// broken. The rollout changes no node, so the controller writes nothing to
// the load balancer.
func TestLabUpstream(t *testing.T) {
	doc := runLab(t, 4*time.Minute, "--scenario", "rollout", "--mode", "upstream", "--backend", "ip", "--app-sigterm", "exit")
	if len(doc) != 1 {
		t.Fatalf("want 1 run, got %v", doc)
	}
	s := doc[0]
	if s["mode"] != string(report.ModeUpstream) || s["backend"] != scenarios.BackendNode || s["external_traffic_policy"] != scenarios.PolicyCluster {
		t.Errorf("ran mode %v, backend %v, policy %v; want upstream, node (whatever --backend says), cluster",
			s["mode"], s["backend"], s["external_traffic_policy"])
	}
	if s["requests"].(float64) < 100 || s["provider_writes"].(float64) != 0 {
		t.Errorf("requests %v, writes during the rollout %v; want traffic and no write", s["requests"], s["provider_writes"])
	}
	if s["long_conns_broken"].(float64) == 0 {
		t.Errorf("every old pod exited at SIGTERM and no WebSocket broke (%v closed, %v failed requests): are failures counted?",
			s["long_conns_closed"], s["failed_requests"])
	}
}

// TestLabRestartIdle is the Azure incident on the real network: with
// nothing changing, the writer is killed and restarted (SIGKILL, then
// SIGTERM: idleRestartsSmoke restarts, one of each; the lab's default of 6
// is make lab's, and the figures' in the docs) while WebSockets stay
// connected through an externalTrafficPolicy Local Service. zerodrop writes nothing on any
// restart, ends no WebSocket and fails no request; the upstream
// controller's writes per restart are reported whatever they are.
func TestLabRestartIdle(t *testing.T) {
	// make test's smoke: one restart of each kind per mode, not the 12 of
	// the default (each a lease to expire and a replacement to start).
	const idleRestartsSmoke = 2
	doc := runLab(t, 12*time.Minute, "--scenario", "restart-idle", "--mode", "upstream,zerodrop",
		"--idle-restarts", strconv.Itoa(idleRestartsSmoke))
	var runs []string
	for _, s := range doc {
		name := fmt.Sprint(s["scenario"], " ", s["mode"], " ", s["backend"], "/", s["external_traffic_policy"])
		runs = append(runs, name)
		perRestart, _ := s["writes_per_restart"].([]any)
		if len(perRestart) != idleRestartsSmoke {
			t.Errorf("%s: writes_per_restart %v, want %d entries", name, s["writes_per_restart"], idleRestartsSmoke)
		}
		if s["mode"] != string(report.ModeZerodrop) {
			continue
		}
		for i, w := range perRestart {
			if w.(float64) != 0 {
				t.Errorf("%s: restart %d made %v writes, want 0", name, i+1, w)
			}
		}
		failed, stalled := s["failed_requests"].(float64), s["requests_late_client_stall"].(float64)
		ended := s["long_conns_closed"].(float64) + s["long_conns_broken"].(float64)
		if s["provider_writes"].(float64) != 0 || ended != 0 || failed-stalled != 0 {
			t.Errorf("%s: %v writes, %v WebSockets ended, %v failed requests (%v by a client stall); want none",
				name, s["provider_writes"], ended, failed, stalled)
		}
	}
	if want := []string{"restart-idle upstream node/local", "restart-idle zerodrop ip/local"}; !slices.Equal(runs, want) {
		t.Errorf("runs %v, want %v", runs, want)
	}
}
