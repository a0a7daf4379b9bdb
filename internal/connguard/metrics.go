package connguard

import "github.com/prometheus/client_golang/prometheus"

// ClosedDesc describes zerodrop_connguard_closed_total (the reference
// docs list it with the metrics of internal/metrics).
var ClosedDesc = closedDesc

var closedDesc = prometheus.NewDesc("zerodrop_connguard_closed_total",
	"Connections a guarded listener closed before they were trusted, by listener and reason (evicted_source: its source exceeded its pending cap and it was that source's oldest; evicted_global: all sources exceeded the global cap and it was the oldest; handshake_timeout: pending longer than the handshake bound).",
	[]string{"listener", "reason"}, nil)

// collector exposes one listener's Stats as a Prometheus counter.
type collector struct {
	name string
	l    *Listener
}

// Collector exposes the connections l closed, by reason, as
// zerodrop_connguard_closed_total{listener=name}; register it on the
// process' metrics registry.
func (l *Listener) Collector(name string) prometheus.Collector { return collector{name: name, l: l} }

// Describe sends nothing: an unchecked collector, because one process may
// guard several listeners (the drain endpoint, a replica's state endpoint),
// each reporting the same metric under its own listener label, which the
// registry's per-collector descriptor check would refuse.
func (c collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	for _, v := range []struct {
		reason string
		n      uint64
	}{{ReasonSource, s.EvictedSource}, {ReasonGlobal, s.EvictedGlobal}, {ReasonExpired, s.ExpiredHandshake}} {
		ch <- prometheus.MustNewConstMetric(closedDesc, prometheus.CounterValue, float64(v.n), c.name, v.reason)
	}
}
