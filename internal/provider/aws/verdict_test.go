package aws

import (
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

func TestUnhealthySince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	prev := map[string]time.Time{"i-a:30080": t0, "i-b:30080": t0}
	got := unhealthySince(prev, []target{
		{ID: "i-a", Port: 30080, State: stateUnhealthy},         // still: keeps t0
		{ID: "i-b", Port: 30080, State: stateHealthy},           // recovered: dropped
		{ID: "i-c", Port: 30080, State: stateUnhealthyDraining}, // new: t1
		{ID: "i-d", Port: 30080, State: stateInitial},
	}, t1)
	want := map[string]time.Time{"i-a:30080": t0, "i-c:30080": t1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !got[k].Equal(v) {
			t.Errorf("%s: since %v, want %v", k, got[k], v)
		}
	}
}

// TestStatuses: what the gates read of one answer (verdict.go): registered
// past Elb.RegistrationInProgress, draining as Draining, and Down (not
// Healthy) only once unhealthy for the propagation time while another
// target of the group is healthy.
func TestStatuses(t *testing.T) {
	const prop = 35 * time.Second
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	type want struct {
		listed  bool
		state   model.BackendState
		healthy bool
	}
	healthyOther := target{ID: "i-other", Port: 30080, State: stateHealthy}
	cases := []struct {
		name   string
		target target
		others []target
		since  time.Duration // how long unhealthy (0: not in since)
		want   want
	}{
		{"registration in progress is not registered", target{State: stateInitial, Reason: reasonRegistrationInProgress}, nil, 0, want{}},
		{"unused is not registered", target{State: stateUnused, Reason: "Target.NotRegistered"}, nil, 0, want{}},
		{"initial health checking: registered, may turn healthy any moment", target{State: stateInitial, Reason: "Elb.InitialHealthChecking"}, nil, 0,
			want{true, model.Active, true}},
		{"healthy", target{State: stateHealthy}, nil, 0, want{true, model.Active, true}},
		{"unhealthy for less than the propagation: still sent to", target{State: stateUnhealthy}, []target{healthyOther}, prop - time.Second,
			want{true, model.Active, true}},
		{"unhealthy past the propagation: stopped", target{State: stateUnhealthy}, []target{healthyOther}, prop,
			want{true, model.Active, false}},
		{"unhealthy past the propagation, no healthy target: fails open", target{State: stateUnhealthy},
			[]target{{ID: "i-other", Port: 30080, State: stateUnhealthy}}, 10 * prop, want{true, model.Active, true}},
		{"unhealthy.draining past the propagation: stopped", target{State: stateUnhealthyDraining}, []target{healthyOther}, prop,
			want{true, model.Active, false}},
		{"draining", target{State: stateDraining, Reason: "Target.DeregistrationInProgress"}, []target{healthyOther}, 0,
			want{true, model.Draining, false}},
		{"unavailable: health checks off, sent to", target{State: "unavailable"}, nil, 0, want{true, model.Active, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := c.target
			tg.ID, tg.Port = "i-node", 30080
			since := map[string]time.Time{}
			if c.since > 0 {
				since[tg.key()] = now.Add(-c.since)
			}
			got := statuses("lb/TCP-80", append([]target{tg}, c.others...), since, now.Add(-time.Second), now, prop)
			var s *provider.BackendStatus
			for i := range got {
				if got[i].Address == "i-node" {
					s = &got[i]
				}
			}
			if (s != nil) != c.want.listed {
				t.Fatalf("listed %v, want %v (%+v)", s != nil, c.want.listed, got)
			}
			if s == nil {
				return
			}
			if s.State != c.want.state || s.Healthy != c.want.healthy || !s.HealthKnown || s.Lags || s.Port != 30080 {
				t.Errorf("got %+v, want state %s healthy %v", *s, c.want.state, c.want.healthy)
			}
			// What the termination gate makes of it: Down as news.
			if down := provider.DownIsNews(*s, now.Add(-time.Minute)); down == c.want.healthy {
				t.Errorf("DownIsNews %v with healthy %v", down, c.want.healthy)
			}
		})
	}
}
