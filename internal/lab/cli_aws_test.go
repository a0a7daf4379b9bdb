package lab

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/scenarios"
)

// TestAWSFlags: --provider aws-emulator plans the AWS world's scenarios in
// its modes, names the others as not run under `all`, refuses what it
// cannot run, and gives the recipe mode the EKS guide's recipe unless a
// recipe flag is given.
func TestAWSFlags(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), append([]string{"--provider", "aws-emulator", "--dry-run"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := run("--mode", "upstream,recipe", "--scenario", "rollout,rollout-local,restart-idle,maintenance", "--traffic-policy", "both",
		"--aws-registration-delay", "5s", "--aws-propagation", "0s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"rollout node/cluster recipe", "rollout-local node/local upstream", "restart-idle node/local upstream",
		"maintenance node/cluster upstream", "world: emulated AWS, options: registration delay 5s, propagation 0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if code, out, errOut := run("--mode", "gates", "--scenario", "rollout,rollout-local", "--traffic-policy", "local"); code != 0 ||
		!strings.Contains(out, "rollout node/local gates") || !strings.Contains(out, "rollout-local node/local gates") {
		t.Errorf("--mode gates: exit %d, plan %q, stderr %q: want the gated rollouts planned", code, out, errOut)
	}
	if code, out, errOut := run("--mode", "upstream,recipe,gates", "--scenario", "drain-node", "--traffic-policy", "both"); code != 0 ||
		!strings.Contains(out, "drain-node node/local gates") || !strings.Contains(out, "drain-node node/cluster recipe") ||
		!strings.Contains(out, "drain-node node/cluster upstream") {
		t.Errorf("drain-node: exit %d, plan %q, stderr %q: want it planned in every mode and policy", code, out, errOut)
	}
	// The sweep's flags: the gate's assumption apart from the emulator's
	// lag, and the CCM's health check scaled through the annotations.
	code, out, errOut = run("--mode", "recipe,gates", "--scenario", "rollout-local", "--aws-propagation", "120s",
		"--aws-assumed-propagation", "35s", "--aws-health-check-interval", "5s", "--aws-health-check-thresholds", "2")
	if want := "propagation 2m0s, deregistration delay 5m0s (the target group's default), gates assume propagation 35s, health check every 5s, thresholds 2"; code != 0 ||
		!strings.Contains(out, want) {
		t.Errorf("sweep flags: exit %d, plan %q, stderr %q: want the world's options %q", code, out, errOut, want)
	}
	if code, out, errOut := run("--scenario", "all", "--mode", "upstream"); code != 0 || !strings.Contains(out, "not run: churn: does not run on emulated AWS") {
		t.Errorf("--scenario all: exit %d, plan %q, stderr %q: want churn named as not run", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--mode", "zerodrop"}, "not zerodrop"},
		{[]string{"--mode", "upstream", "--scenario", "churn"}, "not churn"},
		{[]string{"--mode", "upstream", "--aws-propagation", "-1s"}, "--aws-propagation"},
		{[]string{"--mode", "upstream", "--data-plane-replicas", "2"}, "--data-plane-replicas"},
		{[]string{"--mode", "gates", "--aws-assumed-propagation", "-1s"}, "--aws-assumed-propagation"},
		{[]string{"--mode", "upstream", "--aws-health-check-interval", "4s"}, "5s to 300s"},
		{[]string{"--mode", "upstream", "--aws-health-check-thresholds", "11"}, "2 to 10"},
	} {
		if code, _, errOut := run(tc.args...); code != 2 || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", tc.args, code, errOut, tc.says)
		}
	}

	for _, tc := range []struct {
		args []string
		want scenarios.Recipe
	}{
		{nil, AWSRecipe},
		{[]string{"--recipe-prestop-sleep", "20s"}, scenarios.Recipe{PreStopSleep: 20 * time.Second,
			GracePeriod: scenarios.DefaultRecipe.GracePeriod, MinReady: scenarios.DefaultRecipe.MinReady}},
	} {
		f, _, ok := parseFlags(append([]string{"--provider", "aws-emulator", "--mode", "recipe", "--dry-run"}, tc.args...), io.Discard)
		if !ok {
			t.Fatalf("%v: flags refused", tc.args)
		}
		opts, _, err := f.options(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.awsWorld(&opts, io.Discard); !ok {
			t.Fatalf("%v: refused", tc.args)
		}
		if opts.Recipe != tc.want {
			t.Errorf("%v: recipe %+v, want %+v", tc.args, opts.Recipe, tc.want)
		}
	}
	if !slices.Equal(AWSScenarios, []string{"rollout", "rollout-local", "drain-node", "restart-idle", "maintenance"}) {
		t.Errorf("AWSScenarios %v: the scenarios docs/aws.md names", AWSScenarios)
	}
	for _, name := range AWSScenarios {
		if _, ok := scenarios.ScenarioNamed(name); !ok {
			t.Errorf("AWSScenarios names %s, which the lab does not have", name)
		}
	}
}
