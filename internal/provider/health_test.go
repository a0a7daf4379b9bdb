package provider

import (
	"testing"
	"time"
)

// TestDownIsNews: a lagging health read's Down is believed only after an Up
// read begun after the moment asked about; a provider's own verdict as it
// is.
func TestDownIsNews(t *testing.T) {
	since := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	before, after, later := since.Add(-time.Second), since.Add(time.Second), since.Add(2*time.Second)
	for _, c := range []struct {
		name string
		s    BackendStatus
		want bool
	}{
		{"unknown", BackendStatus{}, false},
		{"own check Down", BackendStatus{HealthKnown: true}, true},
		{"own check Up", BackendStatus{HealthKnown: true, Healthy: true}, false},
		{"lagging Up", BackendStatus{HealthKnown: true, Healthy: true, Lags: true, Probed: true, ProbedAt: later, UpAt: later}, false},
		{"lagging, no answer yet", BackendStatus{HealthKnown: true, Lags: true}, false},
		{"lagging Down, read before", BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: before, UpAt: before}, false},
		{"lagging Down, never read Up", BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: later}, false},
		{"lagging Down after an Up read before", BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: later, UpAt: before}, false},
		{"lagging Down after an Up read after", BackendStatus{HealthKnown: true, Lags: true, Probed: true, ProbedAt: later, UpAt: after}, true},
		{"lagging, not listed", BackendStatus{HealthKnown: true, Lags: true, ProbedAt: later, UpAt: after}, false},
	} {
		if got := DownIsNews(c.s, since); got != c.want {
			t.Errorf("%s: DownIsNews = %v, want %v", c.name, got, c.want)
		}
	}
}
