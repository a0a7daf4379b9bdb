package aws

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLeaderFromLog: the leader is told by its log, whichever way
// client-go's release spells the line.
func TestLeaderFromLog(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, log string
		leads     bool
	}{
		{"structured", `I1130 14:52:01.683252    2233 leaderelection.go:272] "Successfully acquired lease" lock="ns/cloud-controller-manager"` + "\n", true},
		{"printf", "I1130 14:52:01.683252    2233 leaderelection.go:258] successfully acquired lease ns/cloud-controller-manager\n", true},
		{"standby", `I1130 14:52:01.703428    2232 leaderelection.go:258] "Attempting to acquire leader lease..." lock="ns/cloud-controller-manager"` + "\n", false},
		{"no log", "", false},
	} {
		path := filepath.Join(dir, tc.name+".log")
		if tc.log != "" {
			if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := logContains(path, leaseAcquired); got != tc.leads {
			t.Errorf("%s: leads %t, want %t", tc.name, got, tc.leads)
		}
	}
}
