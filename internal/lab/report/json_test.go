package report

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteJSONKeepsErrors: a run that did not complete is in the JSON
// with its reason (Err itself is not serialisable).
func TestWriteJSONKeepsErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab.json")
	rep := Report{Scenarios: []Result{{Scenario: "rollout", Mode: "zerodrop", Err: errors.New("steady state: not reached")}, {Scenario: "rollout", Mode: "upstream"}}}
	if err := WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Scenarios) != 2 || got.Scenarios[0].Error != "steady state: not reached" || got.Scenarios[1].Error != "" {
		t.Errorf("JSON scenarios %+v: want the first with its error, the second without", got.Scenarios)
	}
}
