package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSum adds up every series of what it is given: a vector, one child of
// it, a gauge, an unchecked collector; a histogram has no one value, and
// an empty vector sums to 0.
func TestSum(t *testing.T) {
	m, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.ProviderWrites.WithLabelValues("haproxy", "reload").Add(2)
	m.ProviderWrites.WithLabelValues("azure", "put").Add(3)
	m.HealthCheckRate.Set(1.5)
	m.ReconcileLatency.WithLabelValues("noop").Observe(7)
	unchecked := prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		d := prometheus.NewDesc("test_closed_total", "", []string{"reason"}, nil)
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, 4, "a")
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, 5, "b")
	})
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"vector", m.ProviderWrites, 5},
		{"child", m.ProviderWrites.WithLabelValues("azure", "put"), 3},
		{"gauge", m.HealthCheckRate, 1.5},
		{"unchecked collector", unchecked, 9},
		{"histogram", m.ReconcileLatency, 0},
		{"empty vector", m.Reconciles, 0},
	} {
		if got := Sum(c.c); got != c.want {
			t.Errorf("%s: Sum = %v, want %v", c.name, got, c.want)
		}
	}
}
