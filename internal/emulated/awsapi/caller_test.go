package awsapi_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// TestCallerRecorded: the emulator accepts its second key pair as well as
// its first, and records which key signed each call, so that two clients
// of one account (the cloud controller and zerodrop, in the lab) are told
// apart; the second key with the first key's secret is refused.
func TestCallerRecorded(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	describe := func(creds staticCreds) error {
		cfg := w.cfg.Copy()
		cfg.Credentials = creds
		c := elbv2.NewFromConfig(cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(w.url) })
		_, err := c.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
		return err
	}
	if err := describe(staticCreds{awsapi.AccessKeyID, awsapi.SecretAccessKey}); err != nil {
		t.Fatalf("the first key: %v", err)
	}
	if err := describe(staticCreds{awsapi.SecondAccessKeyID, awsapi.SecondSecretAccessKey}); err != nil {
		t.Fatalf("the second key: %v", err)
	}
	if got := apiCode(t, describe(staticCreds{awsapi.SecondAccessKeyID, awsapi.SecretAccessKey})); got != "SignatureDoesNotMatch" {
		t.Errorf("the second key with the first's secret: %q, want SignatureDoesNotMatch", got)
	}
	calls, _ := w.emu.Calls(0)
	want := []struct {
		caller string
		status int
	}{{awsapi.AccessKeyID, 200}, {awsapi.SecondAccessKeyID, 200}, {awsapi.SecondAccessKeyID, 403}}
	if len(calls) != len(want) {
		t.Fatalf("%d calls recorded, want %d", len(calls), len(want))
	}
	for i, c := range calls {
		if c.Caller != want[i].caller || c.Status != want[i].status {
			t.Errorf("call %d: caller %q status %d, want %q %d", i, c.Caller, c.Status, want[i].caller, want[i].status)
		}
	}
}
