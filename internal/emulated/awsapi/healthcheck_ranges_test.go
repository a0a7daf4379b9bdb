package awsapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// TestHealthCheckRanges: with Options.HealthCheckRanges, a target group's
// health-check timing is accepted within AWS's ranges (interval 5 to 300 s,
// timeout 2 to 120 s, thresholds 2 to 10) and refused with ValidationError
// outside them, on create and on modify; a refused modify changes nothing.
// The lab's scaled checks (an interval of 5 s, thresholds of 2) are at the
// edge AWS allows. Without the option a harness's 1 s check is accepted.
func TestHealthCheckRanges(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	if _, err := w.elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{Name: aws.String("tg-harness"), Port: aws.Int32(30080),
		Protocol: elbv2types.ProtocolEnumTcp, VpcId: aws.String("vpc-1"), HealthCheckIntervalSeconds: aws.Int32(1),
		HealthCheckTimeoutSeconds: aws.Int32(1)}); err != nil {
		t.Fatalf("a 1 s check without HealthCheckRanges: %v, want accepted", err)
	}
	w = newWorldWith(t, awsapi.Options{HealthCheckRanges: true})
	type timing struct{ interval, timeout, healthy, unhealthy int32 }
	create := func(name string, c timing) (*elbv2.CreateTargetGroupOutput, error) {
		return w.elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{
			Name: aws.String(name), Port: aws.Int32(30080), Protocol: elbv2types.ProtocolEnumTcp, VpcId: aws.String("vpc-1"),
			HealthCheckProtocol: elbv2types.ProtocolEnumHttp, HealthCheckPort: aws.String("32000"), HealthCheckPath: aws.String("/healthz"),
			HealthCheckIntervalSeconds: aws.Int32(c.interval), HealthCheckTimeoutSeconds: aws.Int32(c.timeout),
			HealthyThresholdCount: aws.Int32(c.healthy), UnhealthyThresholdCount: aws.Int32(c.unhealthy),
		})
	}
	for i, tc := range []struct {
		name string
		c    timing
		ok   bool
	}{
		{"the CCM's Local check", timing{10, 10, 2, 2}, true},
		{"the lab's scaled check", timing{5, 5, 2, 2}, true},
		{"the longest", timing{300, 120, 10, 10}, true},
		{"interval under 5 s", timing{4, 2, 2, 2}, false},
		{"interval over 300 s", timing{301, 10, 2, 2}, false},
		{"timeout under 2 s", timing{5, 1, 2, 2}, false},
		{"timeout over 120 s", timing{300, 121, 2, 2}, false},
		{"healthy threshold 1", timing{5, 5, 1, 2}, false},
		{"unhealthy threshold 11", timing{5, 5, 2, 11}, false},
	} {
		out, err := create(fmt.Sprintf("tg-%d", i), tc.c)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %+v: refused: %v", tc.name, tc.c, err)
		case tc.ok && aws.ToInt32(out.TargetGroups[0].HealthCheckIntervalSeconds) != tc.c.interval:
			t.Errorf("%s: created with interval %d, want %d", tc.name, aws.ToInt32(out.TargetGroups[0].HealthCheckIntervalSeconds), tc.c.interval)
		case !tc.ok && err == nil:
			t.Errorf("%s %+v: accepted, want ValidationError", tc.name, tc.c)
		case !tc.ok:
			if code := apiCode(t, err); code != "ValidationError" {
				t.Errorf("%s: refused with %s, want ValidationError", tc.name, code)
			}
		}
	}

	out, err := create("tg-modify", timing{10, 10, 2, 2})
	if err != nil {
		t.Fatal(err)
	}
	arn := out.TargetGroups[0].TargetGroupArn
	if _, err := w.elb.ModifyTargetGroup(ctx, &elbv2.ModifyTargetGroupInput{TargetGroupArn: arn,
		HealthCheckIntervalSeconds: aws.Int32(3), HealthyThresholdCount: aws.Int32(3)}); err == nil || apiCode(t, err) != "ValidationError" {
		t.Errorf("ModifyTargetGroup to an interval of 3 s: %v, want ValidationError", err)
	}
	if _, err := w.elb.ModifyTargetGroup(ctx, &elbv2.ModifyTargetGroupInput{TargetGroupArn: arn,
		HealthCheckIntervalSeconds: aws.Int32(5), HealthCheckTimeoutSeconds: aws.Int32(5)}); err != nil {
		t.Errorf("ModifyTargetGroup to an interval of 5 s: %v", err)
	}
	got, err := w.elb.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{TargetGroupArns: []string{aws.ToString(arn)}})
	if err != nil {
		t.Fatal(err)
	}
	tg := got.TargetGroups[0]
	if aws.ToInt32(tg.HealthCheckIntervalSeconds) != 5 || aws.ToInt32(tg.HealthyThresholdCount) != 2 {
		t.Errorf("after a refused and an accepted modify: interval %d, healthy threshold %d; want 5 and 2 (the refused one changed nothing)",
			aws.ToInt32(tg.HealthCheckIntervalSeconds), aws.ToInt32(tg.HealthyThresholdCount))
	}
}
