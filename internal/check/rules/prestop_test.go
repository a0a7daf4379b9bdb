package rules

import (
	"math"
	"testing"
)

func TestExecSleep(t *testing.T) {
	tests := []struct {
		cmd  []string
		want float64
		ok   bool
	}{
		{[]string{"sleep", "15"}, 15, true},
		{[]string{"/bin/sleep", "2.5"}, 2.5, true},
		{[]string{"sleep", "1m", "30s"}, 90, true},
		{[]string{"sleep", "1h"}, 3600, true},
		{[]string{"sleep", "infinity"}, math.Inf(1), true},
		{[]string{"sleep"}, 0, false},
		{[]string{"sleep", "-5"}, 0, false},
		{[]string{"sleep", "NaN"}, 0, false},
		{[]string{"env", "sleep", "5"}, 5, true},
		{[]string{"sh", "-c", "sleep 5"}, 5, true},
		{[]string{"/bin/bash", "--norc", "-c", "sleep 5"}, 5, true},
		{[]string{"sh", "-ec", "sleep 5 && nginx -s quit"}, 5, true},
		{[]string{"sh", "-c", "echo draining; sleep 10\nkill -QUIT 1"}, 10, true},
		{[]string{"sh", "-c", "exec sleep 7"}, 7, true},
		{[]string{"sh", "-c", "sleep 5 & wait"}, 0, false},
		{[]string{"sh", "-c", "curl -s localhost/quit | sleep 3"}, 0, false},
		{[]string{"sh", "-c", "false || sleep 3"}, 0, false},
		{[]string{"sh", "-c", "sleep 3 || true"}, 3, true},
		{[]string{"sh", "-c", "nginx -s quit"}, 0, false},
		{[]string{"sh", "script.sh"}, 0, false},
		{[]string{"sh", "-c"}, 0, false},
		{[]string{"python", "-c", "sleep 5"}, 0, false},
		// A drain loop's sleeps poll a condition: not a fixed delay.
		{[]string{"sh", "-c", "while [ $(netstat -plunt | grep tcp | grep -v envoy | wc -l) -ne 0 ]; do sleep 1; done"}, 0, false},
		{[]string{"/bin/sh", "-c", "sleep 5; until curl -fs localhost:8080/drained; do sleep 2; done"}, 0, false},
		{[]string{"bash", "-c", "for i in $(seq 30); do sleep 1; done"}, 0, false},
		{[]string{"sh", "-c", "while pgrep -x server >/dev/null; do\n  sleep 1\ndone\n"}, 0, false},
		{[]string{"sh", "-c", "echo while we wait; sleep 10"}, 10, true},
		{nil, 0, false},
	}
	for _, tc := range tests {
		got, ok := execSleep(tc.cmd, nil)
		if ok != tc.ok || got != tc.want {
			t.Errorf("execSleep(%q) = %v, %v; want %v, %v", tc.cmd, got, ok, tc.want, tc.ok)
		}
	}
}
