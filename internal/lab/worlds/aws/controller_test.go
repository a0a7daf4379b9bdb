package aws

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// TestControllerEnv: with the environment a controller process sets, the
// SDK's default chain (what `zerodrop controller --provider aws` loads)
// reaches the emulator over HTTPS, trusting its authority, and signs with
// the second key: the record names zerodrop as the caller.
func TestControllerEnv(t *testing.T) {
	emu := awsapi.New(awsapi.Options{})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	served, err := emu.ServeTLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	set, unset := controllerEnv(ca)
	for _, k := range unset {
		t.Setenv(k, "")
	}
	for k, v := range set {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(awsapi.DefaultRegion))
	if err != nil {
		t.Fatal(err)
	}
	c := elbv2.NewFromConfig(cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(served.URL) })
	if _, err := c.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{}); err != nil {
		t.Fatalf("DescribeLoadBalancers through the default chain: %v", err)
	}
	calls, _ := emu.Calls(0)
	if len(calls) != 1 || calls[0].Caller != awsapi.SecondAccessKeyID || calls[0].Status != 200 {
		t.Errorf("calls %+v: want one accepted call signed with the second key", calls)
	}
}

// TestGatesControllerArgs: gates mode's controller flags are `zerodrop
// controller --provider aws`'s, valid, with the run's emulator, region,
// cluster ID and the propagation the world assumes (here not the
// emulator's); the other modes run no controller of zerodrop's.
func TestGatesControllerArgs(t *testing.T) {
	a := &run{w: New(Options{Propagation: 120 * time.Second, AssumedPropagation: 5 * time.Second}),
		env:    world.Env{Mode: report.ModeGates, Class: "zerodrop.dev/lab-1", Net: &cluster.Network{Kubeconfig: "/lab/kubeconfig"}},
		served: &awsapi.Served{URL: "https://127.0.0.1:4443", CAFile: "/lab/ca.pem"}}
	args := a.ControllerArgs(nil)
	if len(args) < 3 || args[0] != "lab" || args[1] != Command || args[2] != "--emulator-ca=/lab/ca.pem" {
		t.Fatalf("args %q: want lab %s --emulator-ca=FILE first", args, Command)
	}
	cfg, err := controller.ParseArgs(args[3:])
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != "aws" || cfg.AWS.Endpoint != "https://127.0.0.1:4443" || cfg.AWS.Region != awsapi.DefaultRegion ||
		cfg.AWS.ClusterID != clusterID || cfg.AWS.Propagation != 5*time.Second {
		t.Errorf("config %+v: want --provider aws on the run's emulator, region, cluster and the assumed propagation (5s)", cfg.AWS)
	}
	if a.OwnsWriters() {
		t.Error("gates mode: the world owns the writers, so the runner would start no zerodrop controller")
	}
	if got := a.Forwards(); len(got) != 1 || got[0] != "127.0.0.1:4443" {
		t.Errorf("forwards %q: want the emulator's address", got)
	}
	a.env.Mode = report.ModeRecipe
	if !a.OwnsWriters() || a.Forwards() != nil {
		t.Error("recipe mode: the CCM is the only writer, nothing forwarded")
	}
}
