package azure

import (
	"testing"
	"time"
)

// TestHealthForget: the rule-health cache forgets a rule no gate asked
// about for healthForget (a deleted Service's rule would otherwise stay for
// the process's life), keeps one asked about since and one whose read is in
// flight, and scans at most once a minute.
func TestHealthForget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &healthState{rules: map[string]*ruleHealth{
		"lb/gone":     {used: t0},
		"lb/in-use":   {used: t0.Add(healthForget - time.Second)},
		"lb/refresh":  {used: t0, reading: 1},
		"lb/just-now": {used: t0.Add(healthForget)},
	}}
	s.forget(t0.Add(healthForget))
	for k, want := range map[string]bool{"lb/gone": false, "lb/in-use": true, "lb/refresh": true, "lb/just-now": true} {
		if _, ok := s.rules[k]; ok != want {
			t.Errorf("after %s: %s kept %v, want %v", healthForget, k, ok, want)
		}
	}
	// Within a minute of the last scan nothing is scanned.
	s.rules["lb/in-use"].used = t0
	s.forget(t0.Add(healthForget + 30*time.Second))
	if _, ok := s.rules["lb/in-use"]; !ok {
		t.Error("forget scanned again within a minute")
	}
	s.forget(t0.Add(healthForget + time.Minute))
	if _, ok := s.rules["lb/in-use"]; ok {
		t.Error("a rule unused for longer than healthForget kept after the next scan")
	}
}
