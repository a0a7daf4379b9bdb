package lab

import (
	"encoding/json"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

// TestLabUpdate is `make test`'s short data-plane upgrade (issue 50): the
// chart's data-plane DaemonSet of two nodes updated with surge (maxSurge
// 1, maxUnavailable 0) under load, the old HAProxy's drain bounded by a
// 10 s haproxy.hardStopAfter (the timed WebSockets live up to 20 s): no
// request may fail, and no WebSocket that ended before its old pod's bound
// may break.
func TestLabUpdate(t *testing.T) {
	entries := runLab(t, 8*time.Minute, "--scenario", report.ScenarioLBUpdate, "--mode", "zerodrop",
		"--data-plane-replicas", "2", "--from-chart", "--data-plane-update", report.UpdateSurge, "--data-plane-hard-stop-after", "10s")
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	var runs []report.Result
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].DataPlaneUpdate == nil {
		t.Fatalf("want one run with lb-update's figures, got %s", raw)
	}
	f := runs[0].DataPlaneUpdate
	if f.Strategy != report.UpdateSurge || len(f.Nodes) != 2 {
		t.Fatalf("strategy %s over %d nodes, want surge over 2: %+v", f.Strategy, len(f.Nodes), f)
	}
	for _, n := range f.Nodes {
		if n.WebSocketsThroughOld < report.MinThroughOld {
			t.Errorf("%s: %d timed WebSockets through its old pod at its replacement, want %d or more", n.Node, n.WebSocketsThroughOld, report.MinThroughOld)
		}
	}
	if !f.Lossless() {
		t.Errorf("the surge lost traffic: %s; per node %+v", f.Check(), f.Nodes)
	}
}
