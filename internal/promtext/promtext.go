// Package promtext is the project's one reader of Prometheus metrics: the
// text exposition format a controller's /metrics serves (the lab's write
// counts, hack/procmem's memory and writes) and, for a controller run in
// process, what its registry gathers (hack/demo, and internal/metrics.Sum,
// the tests' and benches' count of one collector). Everything that reads a
// metric value goes through Metrics.Sum, so a change to how a name or a label
// is matched, or which kinds of metric have a value, is made once. The parse itself is client_golang's own
// (expfmt), the same code that writes the format on the other side.
//
// A test (cmd/zerodrop's TestOneOfEachMechanism) keeps it the only one:
// nothing else parses metrics text.
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are metric families by name.
type Metrics map[string]*dto.MetricFamily

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Metrics, error) {
	// UTF-8 names, as client_golang writes them since v1.20; the legacy
	// names the project uses are a subset.
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics text: %w", err)
	}
	return Metrics(mfs), nil
}

// Gathered indexes what a registry's Gather returned (a controller run in
// process), so that it is read as a scrape is.
func Gathered(mfs []*dto.MetricFamily) Metrics {
	m := make(Metrics, len(mfs))
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

// Fetch GETs url (a /metrics endpoint) and parses the answer.
func Fetch(ctx context.Context, client *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	// Text only: the negotiated protobuf format would need another parser.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: %s", url, resp.Status)
	}
	m, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	return m, nil
}

// Sum adds the values of the samples of the counter, gauge or untyped
// metric name whose labels include every name=value pair of labels (given
// as name, value, name, value, …); found is false when no sample matched.
func (m Metrics) Sum(name string, labels ...string) (sum float64, found bool) {
	if len(labels)%2 != 0 {
		panic("promtext: Sum takes label names and values in pairs")
	}
	mf := m[name]
	if mf == nil {
		return 0, false
	}
	for _, s := range mf.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		default:
			continue // a histogram or summary has no one value
		}
		found = true
	}
	return sum, found
}

// hasLabels reports whether s carries every name=value pair of want.
func hasLabels(s *dto.Metric, want []string) bool {
	for i := 0; i < len(want); i += 2 {
		ok := false
		for _, lp := range s.GetLabel() {
			if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
