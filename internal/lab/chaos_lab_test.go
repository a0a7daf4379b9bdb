package lab

import (
	"fmt"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// TestLabChaos runs the chaos scenarios, shortened, in zerodrop mode: the
// writer SIGKILLed at the first write of a plan twice during rolling
// updates, and kube-apiserver stopped for 15 s (longer than the renew
// deadline, so the leader loses its lease). The lab itself fails a chaos run
// of zerodrop that lost anything (lossless); this test checks that the
// report says what happened: the kills were made, each restart's writes are
// there, no backend was doubled, and the outage wrote and changed nothing.
func TestLabChaos(t *testing.T) {
	skipUnlessLong(t)
	doc := runLab(t, 12*time.Minute, "--scenario", "kill-mid-plan,apiserver-down", "--mode", "zerodrop",
		"--kills", "2", "--apiserver-outage", "15s")
	if len(doc) != 2 {
		t.Fatalf("%d runs, want kill-mid-plan and apiserver-down", len(doc))
	}
	for _, s := range doc {
		name := fmt.Sprint(s["scenario"], " ", s["backend"], "/", s["external_traffic_policy"])
		// As in TestLabRollout, a request late only by a stall of the lab
		// process is not zerodrop's.
		failed, stalled := s["failed_requests"].(float64), s["requests_late_client_stall"].(float64)
		if failed-stalled != 0 || s["long_conns_broken"].(float64) != 0 || s["duplicate_backend_samples"].(float64) != 0 {
			t.Errorf("%s: %v failed requests (%v by a client stall), %v broken long connections, a backend doubled in %v samples",
				name, failed, stalled, s["long_conns_broken"], s["duplicate_backend_samples"])
		}
		chaos, _ := s["chaos"].(map[string]any)
		if chaos == nil {
			t.Errorf("%s: no chaos figures in %v", name, s)
			continue
		}
		switch s["scenario"] {
		case report.ScenarioKillMidPlan:
			writes, _ := s["writes_per_restart"].([]any)
			verbs, _ := chaos["kill_verbs"].([]any)
			if chaos["kills"] != 2.0 || len(writes) != 2 || len(verbs) != 2 {
				t.Errorf("%s: kills %v, writes per restart %v, kill verbs %v; want 2 of each", name, chaos["kills"], writes, verbs)
			}
		case report.ScenarioAPIServerDown:
			if chaos["outage_seconds"].(float64) < 15 || chaos["writes_during_outage"] != 0.0 || chaos["writes_after_recovery"] != 0.0 ||
				chaos["pool_changes_during_outage"] != 0.0 {
				t.Errorf("%s: outage %vs, writes during %v, after %v, backends changed in %v samples; want ≥ 15s, 0, 0, 0",
					name, chaos["outage_seconds"], chaos["writes_during_outage"], chaos["writes_after_recovery"], chaos["pool_changes_during_outage"])
			}
		default:
			t.Errorf("unexpected run %s", name)
		}
	}
}
