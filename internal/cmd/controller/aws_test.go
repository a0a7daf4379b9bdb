package controller

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	zdaws "zerodrop.dev/zerodrop/internal/provider/aws"
)

// TestAWSDefaultChain: --provider aws as a process runs it, credentials
// and the endpoint's authority from the environment through the SDK's
// default chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_CA_BUNDLE;
// instance metadata off) and --aws-endpoint, --aws-region: its calls reach
// the emulator over HTTPS, signed as it checks them, and a Service without
// an NLB is no rule, not an error.
func TestAWSDefaultChain(t *testing.T) {
	emu := awsapi.New(awsapi.Options{})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	served, err := emu.ServeTLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": awsapi.AccessKeyID, "AWS_SECRET_ACCESS_KEY": awsapi.SecretAccessKey,
		"AWS_CA_BUNDLE": ca, "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none")} {
		t.Setenv(k, v)
	}
	cfg, err := ParseArgs([]string{"--provider=aws", "--aws-endpoint=" + served.URL, "--aws-region=" + awsapi.DefaultRegion})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := newAWS(context.Background(), cfg.AWS, zdaws.Options{Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.ForeignRuleByHost(context.Background(), provider.ForeignService{Namespace: "ns", Name: "web", UID: "0000-1111",
		Hostname: "a00001111-1.elb.us-east-1.amazonaws.com"}, 80, model.TCP)
	if err != nil || r != nil {
		t.Fatalf("a Service without an NLB: %+v, %v; want no rule and no error", r, err)
	}
	calls, _ := emu.Calls(0)
	if len(calls) != 1 || calls[0].Operation != "DescribeLoadBalancers" || calls[0].Error != "LoadBalancerNotFound" {
		t.Errorf("calls %v, want one DescribeLoadBalancers answered LoadBalancerNotFound", calls)
	}
}
