package lab

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

var updateGolden = flag.Bool("update", false, "write testdata/dryrun.golden anew from this tree's --dry-run answers")

// dryRunMatrix is every world the lab has (one HAProxy, HAProxy replicas,
// the chart's install with and without replicas, Azure counting writes,
// Azure with traffic and its sweeps) with every scenario, mode, backend and
// policy it takes: what --dry-run answers for each is the lab's plan.
var dryRunMatrix = [][]string{
	{},
	{"--scenario", "all", "--mode", "all", "--backend", "both", "--traffic-policy", "both"},
	{"--scenario", "all", "--mode", "all", "--backend", "both", "--traffic-policy", "both", "--data-plane-replicas", "2"},
	{"--scenario", "all", "--mode", "all", "--backend", "both", "--traffic-policy", "both", "--from-chart"},
	{"--scenario", "all", "--mode", "all", "--backend", "both", "--traffic-policy", "both", "--from-chart", "--data-plane-replicas", "2"},
	{"--scenario", "all", "--mode", "zerodrop", "--backend", "node", "--traffic-policy", "local"},
	{"--scenario", "restart-idle", "--mode", "all", "--backend", "both", "--traffic-policy", "both"},
	{"--scenario", "kill-mid-plan,churn", "--mode", "all", "--backend", "both", "--traffic-policy", "both"},
	{"--provider", "azure-emulator"},
	{"--provider", "azure-emulator", "--scenario", "all", "--mode", "all"},
	{"--provider", "azure-emulator", "--scenario", "restart-idle", "--mode", "all"},
	{"--provider", "azure-emulator", "--scenario", "kill-mid-plan", "--mode", "all"},
	{"--provider", "azure-emulator", "--scenario", "churn", "--mode", "all"},
	{"--provider", "azure-emulator", "--scenario", "shared-lb", "--mode", "all"},
	{"--provider", "azure-emulator", "--scenario", "rollout,rollout-local,scale-down,drain-node", "--mode", "all", "--traffic-policy", "both"},
	{"--provider", "azure-emulator", "--scenario", "rollout-local", "--mode", "all", "--arm-latency", "10s"},
	{"--provider", "azure-emulator", "--scenario", "rollout", "--mode", "all", "--arm-latency", "1s,10s", "--lb-propagation", "0s,5s"},
}

// TestDryRunGolden: what `zerodrop lab --dry-run` answers for every world,
// scenario and mode (dryRunMatrix) and for every lab command README.md and
// docs/lab.md show is testdata/dryrun.golden, which was written at the start
// of the lab's refactoring into worlds: a refactoring that changes the
// lab's plan changes a line here, and each such change is deliberate
// (`go test -run TestDryRunGolden ./internal/lab/ -args -update`).
func TestDryRunGolden(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cases := append([][]string{}, dryRunMatrix...)
	for _, doc := range []string{"README.md", "docs/lab.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range labCommands(string(b)) {
			args, err := labArgs(root, cmd)
			if err != nil || (len(args) > 0 && !strings.HasPrefix(args[0], "-")) {
				continue // TestDocLabCommands reports these
			}
			cases = append(cases, args)
		}
	}
	var got bytes.Buffer
	seen := map[string]bool{}
	for _, args := range cases {
		key := strings.Join(args, " ")
		if seen[key] {
			continue
		}
		seen[key] = true
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), append(append([]string{}, args...), "--dry-run"), &stdout, &stderr)
		fmt.Fprintf(&got, "== lab %s --dry-run (exit %d)\n%s%s", key, code, stdout.String(), stderr.String())
	}
	// The repository's place on this machine is not the plan.
	out := strings.ReplaceAll(got.String(), root, "<repo>")
	golden := filepath.Join("testdata", "dryrun.golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), out); d != "" {
		t.Fatalf("--dry-run differs from %s (-want +got), rewrite it with -args -update if the change is meant:\n%s", golden, d)
	}
}
