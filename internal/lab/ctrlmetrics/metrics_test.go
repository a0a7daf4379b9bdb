package ctrlmetrics

import (
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/promtext"
)

func TestCountersOf(t *testing.T) {
	m, err := promtext.Parse(strings.NewReader(`# TYPE zerodrop_provider_writes_total counter
zerodrop_provider_writes_total{op="add-server"} 3
zerodrop_provider_writes_total{op="reload"} 1
# TYPE zerodrop_provider_conflicts_total counter
zerodrop_provider_conflicts_total 2
# TYPE zerodrop_reconcile_total counter
zerodrop_reconcile_total{result="success"} 7
# TYPE zerodrop_drain_outcome_total counter
zerodrop_drain_outcome_total{outcome="drained"} 5
zerodrop_drain_outcome_total{outcome="deadline"} 1
zerodrop_drain_outcome_total{outcome="refused"} 9
# TYPE leader_election_master_status gauge
leader_election_master_status{name="a"} 0
leader_election_master_status{name="b"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	c, leader := countersOf(m)
	if want := (Counters{Writes: 4, Conflicts: 2, Drained: 5, Deadline: 1}); c != want || !leader {
		t.Fatalf("got %+v leader %v, want %+v leader true", c, leader, want)
	}
}
