package ctrlmetrics

import (
	"context"
	"net/http"

	"zerodrop.dev/zerodrop/internal/promtext"
)

// counters are a controller's provider figures and its drain calls'
// outcomes (zerodrop_drain_outcome_total), read from its metrics endpoint.
type Counters struct{ Writes, Conflicts, Drained, Deadline float64 }

func (c Counters) Add(o Counters) Counters {
	return Counters{c.Writes + o.Writes, c.Conflicts + o.Conflicts, c.Drained + o.Drained, c.Deadline + o.Deadline}
}

func (c Counters) Sub(o Counters) Counters {
	return Counters{c.Writes - o.Writes, c.Conflicts - o.Conflicts, c.Drained - o.Drained, c.Deadline - o.Deadline}
}

// FetchMetrics reads a controller's counters and leader status at url
// (its /metrics endpoint).
func FetchMetrics(client *http.Client, url string) (Counters, bool, error) {
	m, err := promtext.Fetch(context.Background(), client, url)
	if err != nil {
		return Counters{}, false, err
	}
	c, leader := countersOf(m)
	return c, leader, nil
}

// countersOf sums zerodrop_provider_writes_total and
// zerodrop_provider_conflicts_total over their labels, the drain outcomes
// by outcome, and reads leader_election_master_status.
func countersOf(m promtext.Metrics) (Counters, bool) {
	sum := func(name string, labels ...string) float64 {
		v, _ := m.Sum(name, labels...)
		return v
	}
	c := Counters{
		Writes:    sum("zerodrop_provider_writes_total"),
		Conflicts: sum("zerodrop_provider_conflicts_total"),
		Drained:   sum("zerodrop_drain_outcome_total", "outcome", "drained"),
		Deadline:  sum("zerodrop_drain_outcome_total", "outcome", "deadline"),
	}
	// 1 on the replica that leads (one sample per election name).
	leader := sum("leader_election_master_status") >= 1
	return c, leader
}
