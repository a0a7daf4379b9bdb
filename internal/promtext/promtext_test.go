package promtext

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const sample = `# HELP zerodrop_provider_writes_total Writes.
# TYPE zerodrop_provider_writes_total counter
zerodrop_provider_writes_total{op="add-server",provider="haproxy"} 3
zerodrop_provider_writes_total{op="reload",provider="haproxy"} 1
# TYPE zerodrop_provider_writes_total_extra counter
zerodrop_provider_writes_total_extra 100
# TYPE leader_election_master_status gauge
leader_election_master_status{name="zerodrop"} 1
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.001
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 4
`

func TestSum(t *testing.T) {
	m, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		labels    []string
		want      float64
		wantFound bool
	}{
		{"zerodrop_provider_writes_total", nil, 4, true}, // not the longer name
		{"zerodrop_provider_writes_total", []string{"op", "reload"}, 1, true},
		{"zerodrop_provider_writes_total", []string{"op", "reload", "provider", "azure"}, 0, false},
		{"leader_election_master_status", nil, 1, true},
		{"go_gc_duration_seconds", nil, 0, false},
		{"absent", nil, 0, false},
	} {
		got, found := m.Sum(tc.name, tc.labels...)
		if got != tc.want || found != tc.wantFound {
			t.Errorf("Sum(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, found, tc.want, tc.wantFound)
		}
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	if _, err := Parse(strings.NewReader("not metrics {\n")); err == nil {
		t.Fatal("no error")
	}
}

// TestGatheredReadsAsAScrape: a registry read in process and its text
// give the same sums.
func TestGatheredReadsAsAScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zerodrop_provider_writes_total"}, []string{"op"})
	reg.MustRegister(c)
	c.WithLabelValues("reload").Add(2)
	c.WithLabelValues("add-server").Add(5)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Gathered(mfs).Sum("zerodrop_provider_writes_total"); got != 7 {
		t.Fatalf("sum %v, want 7", got)
	}
	if got, _ := Gathered(mfs).Sum("zerodrop_provider_writes_total", "op", "reload"); got != 2 {
		t.Fatalf("reload %v, want 2", got)
	}
}
