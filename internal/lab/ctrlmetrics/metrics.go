package ctrlmetrics

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// counters are a controller's provider figures and its drain calls'
// outcomes (zerodrop_drain_outcome_total), read from its metrics endpoint.
type Counters struct{ Writes, Conflicts, Drained, Deadline, Reconciles float64 }

func (c Counters) Add(o Counters) Counters {
	return Counters{c.Writes + o.Writes, c.Conflicts + o.Conflicts, c.Drained + o.Drained, c.Deadline + o.Deadline,
		c.Reconciles + o.Reconciles}
}

func (c Counters) Sub(o Counters) Counters {
	return Counters{c.Writes - o.Writes, c.Conflicts - o.Conflicts, c.Drained - o.Drained, c.Deadline - o.Deadline,
		c.Reconciles - o.Reconciles}
}

// fetchMetrics reads a controller's counters and leader status at url.
func FetchMetrics(client *http.Client, url string) (Counters, bool, error) {
	resp, err := client.Get(url)
	if err != nil {
		return Counters{}, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Counters{}, false, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics sums zerodrop_provider_writes_total,
// zerodrop_provider_conflicts_total and zerodrop_reconcile_total over their
// labels and reads
// leader_election_master_status, from the Prometheus text format.
func parseMetrics(r io.Reader) (Counters, bool, error) {
	var c Counters
	leader := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "zerodrop_provider_writes_total":
			c.Writes += v
		case "zerodrop_provider_conflicts_total":
			c.Conflicts += v
		case "zerodrop_reconcile_total":
			c.Reconciles += v
		case "zerodrop_drain_outcome_total":
			switch {
			case strings.Contains(line, `outcome="drained"`):
				c.Drained += v
			case strings.Contains(line, `outcome="deadline"`):
				c.Deadline += v
			}
		case "leader_election_master_status":
			leader = leader || v == 1
		}
	}
	return c, leader, sc.Err()
}
