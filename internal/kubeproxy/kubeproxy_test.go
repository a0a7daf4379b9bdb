package kubeproxy

import (
	"encoding/json"
	"testing"
	"time"
)

// TestLastSync reads the two shapes of kube-proxy's /healthz answer: since
// 1.31 the top-level lastUpdated is the current time and the syncs are per
// family; before, the top-level time was the last sync.
func TestLastSync(t *testing.T) {
	tests := []struct {
		name, body, family string
		want               string
		ok                 bool
	}{
		{name: "1.31+, IPv4", family: "IPv4", ok: true, want: "2026-11-25T10:00:01Z",
			body: `{"lastUpdated":"2026-11-25T10:00:09Z","currentTime":"2026-11-25T10:00:09Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-25T10:00:01Z","healthy":true}}}`},
		{name: "1.31+, dual-stack, IPv6", family: "IPv6", ok: true, want: "2026-11-25T10:00:02Z",
			body: `{"lastUpdated":"2026-11-25T10:00:09Z","currentTime":"2026-11-25T10:00:09Z","status":{"IPv4":{"lastUpdated":"2026-11-25T10:00:01Z"},"IPv6":{"lastUpdated":"2026-11-25T10:00:02Z"}}}`},
		{name: "1.31+, family missing", family: "IPv6", ok: false,
			body: `{"lastUpdated":"2026-11-25T10:00:09Z","currentTime":"2026-11-25T10:00:09Z","status":{"IPv4":{"lastUpdated":"2026-11-25T10:00:01Z"}}}`},
		{name: "before 1.31", family: "IPv4", ok: true, want: "2026-11-25T10:00:03Z",
			body: `{"lastUpdated":"2026-11-25T10:00:03Z","currentTime":"2026-11-25T10:00:09Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Health
			if err := json.Unmarshal([]byte(tt.body), &h); err != nil {
				t.Fatal(err)
			}
			got, ok := h.LastSync(tt.family)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if ok && got.Format(time.RFC3339) != tt.want {
				t.Fatalf("last sync %s, want %s", got.Format(time.RFC3339), tt.want)
			}
		})
	}
}
