package lab

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []report.Mode
	}{
		{"all", []report.Mode{report.ModeUpstream, report.ModeRecipe, report.ModeZerodrop}},
		{"zerodrop", []report.Mode{report.ModeZerodrop}},
		{"recipe,upstream", []report.Mode{report.ModeRecipe, report.ModeUpstream}},
		{"upstream, zerodrop,upstream", []report.Mode{report.ModeUpstream, report.ModeZerodrop}},
		{"baseline", nil},
		{"both", nil},
		{"zerodrop,", nil},
	} {
		if got := parseModes(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("parseModes(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestDryRunNamesWhatItSkips: with --dry-run nothing starts; on the chart's
// install `all` runs every scenario of its world (restart-idle,
// kill-mid-plan and apiserver-down included), and what a mode, the world
// or the flags leave out is named with why; a scenario named that cannot run with the flags exits 2 saying
// why.
func TestDryRunNamesWhatItSkips(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), append(args, "--dry-run"), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := run("--data-plane-replicas", "2", "--from-chart", "--scenario", "all")
	if code != 0 {
		t.Fatalf("--scenario all on the chart: exit %d: %s", code, errOut)
	}
	for _, name := range scenarios.NamesIn(world.Chart) {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("--scenario all on the chart does not run %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "not run: scenario maintenance does not run on the chart's install") {
		t.Errorf("maintenance is not named as not run on the chart:\n%s", out)
	}
	if !strings.Contains(out, "not run: restart-idle in recipe mode: ") {
		t.Errorf("restart-idle's recipe run is not named as not run:\n%s", out)
	}

	code, out, _ = run("--data-plane-replicas", "2", "--scenario", "all")
	if code != 0 {
		t.Fatalf("--scenario all with the lab's replicas: exit %d", code)
	}
	for _, sc := range []string{"restart-idle", "apiserver-down"} {
		if !strings.Contains(out, "not run: scenario "+sc+" does not run with --data-plane-replicas without --from-chart") {
			t.Errorf("%s is not named as not run with the lab's own replicas:\n%s", sc, out)
		}
	}

	if code, out, errOut := run("--provider", "azure-emulator", "--scenario", "all"); code != 0 ||
		!strings.Contains(out, "kill-mid-plan ip/cluster zerodrop") || !strings.Contains(out, "not run: apiserver-down: does not run on emulated Azure") {
		t.Errorf("--provider azure-emulator --scenario all: exit %d, plan %q, stderr %q: want the world's scenarios, the others named as not run", code, out, errOut)
	}
	if code, out, errOut := run("--provider", "azure-emulator", "--scenario", "rollout,rollout-local", "--arm-latency", "1s,10s"); code != 0 ||
		!strings.Contains(out, "rollout-local ip/local zerodrop") {
		t.Errorf("--provider azure-emulator --scenario rollout,rollout-local: exit %d, plan %q, stderr %q; want its traffic runs planned", code, out, errOut)
	}
	// A sweep multiplies the plan: every mode at the first lag, the gated
	// ones (gates, zerodrop) only at the second.
	if code, out, errOut := run("--provider", "azure-emulator", "--scenario", "rollout", "--mode", "upstream,gates,zerodrop",
		"--arm-latency", "1s,10s", "--health-lag", "0s,5s"); code != 0 ||
		!strings.Contains(out, "arm 10s lb+0s lag 5s: 2 runs\n") || !strings.Contains(out, "\n10 runs in all\n") {
		t.Errorf("a sweep of 4 points: exit %d, stderr %q, plan:\n%s\nwant 3 runs at each first-lag point and 2 at the others, 10 in all", code, errOut, out)
	}
	for _, args := range [][]string{
		{"--provider", "azure-emulator", "--scenario", "rollout,lb-replica-restart"},
		{"--data-plane-replicas", "2", "--scenario", "restart-idle"},
		{"--scenario", "lb-replica-restart"},
		{"--scenario", "rollout,no-such-scenario"},
		{"--scenario", "rollout", "--grace-period", "0s"},
		{"--scenario", "rollout", "--grace-period", "1.5s"},
	} {
		code, _, errOut := run(args...)
		name := args[len(args)-1]
		if code != 2 || !strings.Contains(errOut, name[strings.LastIndex(name, ",")+1:]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming the scenario and why", args, code, errOut)
		}
	}
}
