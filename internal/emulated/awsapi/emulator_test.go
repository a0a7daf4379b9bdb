package awsapi_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/aws/smithy-go"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// The real aws-sdk-go-v2 clients, the SDK cloud-provider-aws v1.37.1 uses,
// against the emulator served on HTTPS on loopback.

const cluster = "kubernetes.io/cluster/zd"

// fakeClock is the emulator's clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

type world struct {
	emu   *awsapi.Emulator
	clock *fakeClock
	elb   *elbv2.Client
	ec2   *ec2.Client
	cfg   aws.Config
	url   string
	hc    aws.HTTPClient
}

// newWorld seeds a VPC with a public subnet in two zones, a node security
// group and three running nodes, and serves it.
func newWorld(t *testing.T, probe func(awsapi.ProbeRequest, time.Time) awsapi.CheckResult) *world {
	t.Helper()
	return newWorldWith(t, awsapi.Options{Probe: probe})
}

// newWorldWith is newWorld with the emulator's options (its clock the
// test's).
func newWorldWith(t *testing.T, opts awsapi.Options) *world {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts.Now = clock.Now
	emu := awsapi.New(opts)
	for i, az := range []string{"us-east-1a", "us-east-1b"} {
		id := "subnet-" + az[len(az)-1:]
		emu.AddSubnet(awsapi.Subnet{ID: id, VPCID: "vpc-1", AZ: az, CIDR: []string{"10.0.0.0/24", "10.0.1.0/24"}[i],
			Tags: map[string]string{cluster: "shared", "kubernetes.io/role/elb": "1"}})
	}
	emu.AddRouteTable(awsapi.RouteTable{ID: "rtb-1", VPCID: "vpc-1", Main: true,
		Routes: []awsapi.Route{{DestinationCIDR: "10.0.0.0/16", GatewayID: "local"}, {DestinationCIDR: "0.0.0.0/0", GatewayID: "igw-1"}}})
	emu.AddSecurityGroup(awsapi.SecurityGroup{ID: "sg-nodes", Name: "nodes", VPCID: "vpc-1", Tags: map[string]string{cluster: "owned"}})
	for i, id := range []string{"i-a", "i-b", "i-c"} {
		emu.AddInstance(awsapi.Instance{ID: id, PrivateIP: "10.0.0." + string(rune('1'+i)), PrivateDNSName: "node-" + id,
			SubnetID: "subnet-a", VPCID: "vpc-1", AZ: "us-east-1a", SecurityGroups: []string{"sg-nodes"},
			Tags: map[string]string{cluster: "owned"}})
	}
	served, err := emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	hc, err := served.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	cfg := aws.Config{
		Region:           awsapi.DefaultRegion,
		Credentials:      aws.NewCredentialsCache(staticCreds{awsapi.AccessKeyID, awsapi.SecretAccessKey}),
		HTTPClient:       hc,
		RetryMaxAttempts: 1, // a refusal is the test's answer, not something to retry
	}
	w := &world{emu: emu, clock: clock, cfg: cfg, url: served.URL, hc: hc}
	w.elb = elbv2.NewFromConfig(cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(served.URL) })
	w.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(served.URL) })
	return w
}

type staticCreds struct{ id, secret string }

func (s staticCreds) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: s.id, SecretAccessKey: s.secret, Source: "test"}, nil
}

// TestNLBRoundTrip makes what the CCM makes for an externalTrafficPolicy
// Local Service (aws_loadbalancer.go ensureLoadBalancerv2, createListenerV2,
// ensureTargetGroup) and reads target health through the timeline:
// registration, health checking, healthy, draining, gone.
func TestNLBRoundTrip(t *testing.T) {
	ctx := context.Background()
	failing := map[string]bool{}
	var mu sync.Mutex
	w := newWorld(t, func(p awsapi.ProbeRequest, _ time.Time) awsapi.CheckResult {
		mu.Lock()
		defer mu.Unlock()
		if p.Port != 32000 || p.Path != "/healthz" || p.Protocol != "HTTP" || p.IP == "" {
			t.Errorf("probe %+v: want HTTP /healthz on the health check node port at the node's address", p)
		}
		if failing[p.Target.ID] {
			return awsapi.CheckResult{HTTPCode: 503}
		}
		return awsapi.CheckResult{OK: true, HTTPCode: 200}
	})

	// The CCM first looks its NLB up by name: not found is an error it
	// recognises by type (aws.go describeLoadBalancerv2).
	_, err := w.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Names: []string{"a0123"}})
	var notFound *elbv2types.LoadBalancerNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("DescribeLoadBalancers of a missing NLB: %v, want LoadBalancerNotFoundException", err)
	}
	lbOut, err := w.elb.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{
		Name: aws.String("a0123"), Type: elbv2types.LoadBalancerTypeEnumNetwork,
		SubnetMappings: []elbv2types.SubnetMapping{{SubnetId: aws.String("subnet-a")}, {SubnetId: aws.String("subnet-b")}},
		Tags:           []elbv2types.Tag{{Key: aws.String(cluster), Value: aws.String("owned")}, {Key: aws.String("kubernetes.io/service-name"), Value: aws.String("ns/web")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lb := lbOut.LoadBalancers[0]
	if aws.ToString(lb.DNSName) == "" || lb.State.Code != elbv2types.LoadBalancerStateEnumActive || aws.ToString(lb.VpcId) != "vpc-1" || len(lb.AvailabilityZones) != 2 {
		t.Fatalf("created NLB %+v: want a DNS name, active, in vpc-1, two zones", lb)
	}
	tgOut, err := w.elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{
		Name: aws.String("k8s-ns-web-0123456789"), Port: aws.Int32(30080), Protocol: elbv2types.ProtocolEnumTcp,
		VpcId: aws.String("vpc-1"), TargetType: elbv2types.TargetTypeEnumInstance,
		HealthCheckProtocol: elbv2types.ProtocolEnumHttp, HealthCheckPort: aws.String("32000"), HealthCheckPath: aws.String("/healthz"),
		HealthCheckIntervalSeconds: aws.Int32(10), HealthyThresholdCount: aws.Int32(2), UnhealthyThresholdCount: aws.Int32(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	tgARN := tgOut.TargetGroups[0].TargetGroupArn
	if _, err := w.elb.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: tgARN, Targets: []elbv2types.TargetDescription{
		{Id: aws.String("i-a"), Port: aws.Int32(30080)}, {Id: aws.String("i-b"), Port: aws.Int32(30080)}}}); err != nil {
		t.Fatal(err)
	}
	// No listener forwards to the group yet: its targets are not in use.
	pre, err := w.elb.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: tgARN})
	if err != nil || len(pre.TargetHealthDescriptions) != 2 ||
		pre.TargetHealthDescriptions[0].TargetHealth.Reason != elbv2types.TargetHealthReasonEnumNotInUse {
		t.Fatalf("health before a listener: %+v, %v", pre, err)
	}
	if _, err := w.elb.CreateListener(ctx, &elbv2.CreateListenerInput{LoadBalancerArn: lb.LoadBalancerArn, Port: aws.Int32(80),
		Protocol: elbv2types.ProtocolEnumTcp, DefaultActions: []elbv2types.Action{{Type: elbv2types.ActionTypeEnumForward, TargetGroupArn: tgARN}}}); err != nil {
		t.Fatal(err)
	}

	attrs, err := w.elb.DescribeTargetGroupAttributes(ctx, &elbv2.DescribeTargetGroupAttributesInput{TargetGroupArn: tgARN})
	if err != nil {
		t.Fatal(err)
	}
	if v := attrValue(attrs.Attributes, "deregistration_delay.timeout_seconds"); v != "300" {
		t.Fatalf("deregistration delay %q, want AWS's default 300", v)
	}
	tgs, err := w.elb.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil || len(tgs.TargetGroups) != 1 || aws.ToString(tgs.TargetGroups[0].HealthCheckPath) != "/healthz" ||
		aws.ToInt32(tgs.TargetGroups[0].Port) != 30080 || len(tgs.TargetGroups[0].LoadBalancerArns) != 1 {
		t.Fatalf("DescribeTargetGroups by load balancer: %+v, %v", tgs, err)
	}
	ls, err := w.elb.DescribeListeners(ctx, &elbv2.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil || len(ls.Listeners) != 1 || aws.ToString(ls.Listeners[0].DefaultActions[0].TargetGroupArn) != aws.ToString(tgARN) {
		t.Fatalf("DescribeListeners: %+v, %v", ls, err)
	}

	health := func() map[string]string {
		t.Helper()
		out, err := w.elb.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: tgARN})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range out.TargetHealthDescriptions {
			got[aws.ToString(d.Target.Id)] = string(d.TargetHealth.State) + " " + string(d.TargetHealth.Reason)
		}
		return got
	}
	step := func(d time.Duration, want map[string]string) {
		t.Helper()
		w.clock.Add(d)
		got := health()
		if len(got) != len(want) {
			t.Fatalf("at +%v: %v, want %v", d, got, want)
		}
		for id, s := range want {
			if got[id] != s {
				t.Fatalf("target %s: %q, want %q (all: %v)", id, got[id], s, got)
			}
		}
	}
	step(0, map[string]string{"i-a": "initial Elb.RegistrationInProgress", "i-b": "initial Elb.RegistrationInProgress"})
	step(60*time.Second, map[string]string{"i-a": "initial Elb.InitialHealthChecking", "i-b": "initial Elb.InitialHealthChecking"})
	step(10*time.Second, map[string]string{"i-a": "healthy ", "i-b": "healthy "})
	mu.Lock()
	failing["i-b"] = true
	mu.Unlock()
	step(60*time.Second, map[string]string{"i-a": "healthy ", "i-b": "unhealthy Target.FailedHealthChecks"})

	if _, err := w.elb.DeregisterTargets(ctx, &elbv2.DeregisterTargetsInput{TargetGroupArn: tgARN,
		Targets: []elbv2types.TargetDescription{{Id: aws.String("i-a"), Port: aws.Int32(30080)}}}); err != nil {
		t.Fatal(err)
	}
	step(0, map[string]string{"i-a": "draining Target.DeregistrationInProgress", "i-b": "unhealthy Target.FailedHealthChecks"})
	// i-a still gets new connections for the propagation time; i-b is
	// unhealthy, so with i-a past it the group fails open to i-b.
	if got, _ := w.emu.Receiving(aws.ToString(tgARN)); len(got) != 1 || got[0].ID != "i-a" {
		t.Fatalf("receiving just after deregistration: %v, want i-a (propagation)", got)
	}
	step(299*time.Second, map[string]string{"i-a": "draining Target.DeregistrationInProgress", "i-b": "unhealthy Target.FailedHealthChecks"})
	if got, _ := w.emu.Receiving(aws.ToString(tgARN)); len(got) != 1 || got[0].ID != "i-b" {
		t.Fatalf("receiving with i-a draining and i-b unhealthy: %v, want i-b (fail open)", got)
	}
	step(time.Second, map[string]string{"i-b": "unhealthy Target.FailedHealthChecks"})

	// A target asked for by name that is not registered.
	out, err := w.elb.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: tgARN,
		Targets: []elbv2types.TargetDescription{{Id: aws.String("i-a"), Port: aws.Int32(30080)}}})
	if err != nil || len(out.TargetHealthDescriptions) != 1 ||
		out.TargetHealthDescriptions[0].TargetHealth.Reason != elbv2types.TargetHealthReasonEnumNotRegistered {
		t.Fatalf("health of a deregistered target: %+v, %v", out, err)
	}

	// The record: every call, the writes by operation.
	calls, _ := w.emu.Calls(0)
	writes := awsapi.WritesByOperation(calls)
	for op, n := range map[string]int{"CreateLoadBalancer": 1, "CreateTargetGroup": 1, "RegisterTargets": 1, "CreateListener": 1, "DeregisterTargets": 1} {
		if writes[op] != n {
			t.Errorf("writes[%s] = %d, want %d (all %v)", op, writes[op], n, writes)
		}
	}
	if writes["DescribeTargetHealth"] != 0 || calls[0].Operation != "DescribeLoadBalancers" || calls[0].Error != "LoadBalancerNotFound" {
		t.Errorf("record: first call %+v, writes %v", calls[0], writes)
	}
	if got := calls[len(calls)-1].Params.Get("TargetGroupArn"); got != aws.ToString(tgARN) {
		t.Errorf("last call's TargetGroupArn %q, want %q", got, aws.ToString(tgARN))
	}
}

func attrValue(attrs []elbv2types.TargetGroupAttribute, key string) string {
	for _, a := range attrs {
		if aws.ToString(a.Key) == key {
			return aws.ToString(a.Value)
		}
	}
	return ""
}

func apiCode(t *testing.T, err error) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error", err, err)
	}
	return ae.ErrorCode()
}

// TestSigningRefused: a client signing with another service's name, as a
// [ServiceOverride] with a wrong SigningName does, or another region or
// secret, is refused with the code AWS gives, parsed by the SDK.
func TestSigningRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"ELB signed as ec2", func() error {
			c := elbv2.NewFromConfig(w.cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(w.url) }, elbv2.WithSigV4SigningName("ec2"))
			_, err := c.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
			return err
		}, "SignatureDoesNotMatch"},
		{"EC2 signed as elasticloadbalancing", func() error {
			c := ec2.NewFromConfig(w.cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(w.url) }, ec2.WithSigV4SigningName("elasticloadbalancing"))
			_, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
			return err
		}, "SignatureDoesNotMatch"},
		{"ELB signed for another region", func() error {
			c := elbv2.NewFromConfig(w.cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(w.url) }, elbv2.WithSigV4SigningRegion("eu-west-1"))
			_, err := c.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
			return err
		}, "SignatureDoesNotMatch"},
		{"ELB with a wrong secret", func() error {
			cfg := w.cfg.Copy()
			cfg.Credentials = staticCreds{awsapi.AccessKeyID, "wrong"}
			c := elbv2.NewFromConfig(cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(w.url) })
			_, err := c.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
			return err
		}, "SignatureDoesNotMatch"},
		{"EC2 with an unknown key", func() error {
			cfg := w.cfg.Copy()
			cfg.Credentials = staticCreds{"AKIDOTHER", awsapi.SecretAccessKey}
			c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(w.url) })
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			return err
		}, "AuthFailure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := apiCode(t, c.call()); got != c.want {
				t.Fatalf("error code %q, want %q", got, c.want)
			}
		})
	}
	// Nothing refused reached the state, but every call is recorded.
	calls, _ := w.emu.Calls(0)
	if len(calls) != len(cases) {
		t.Fatalf("%d calls recorded, want %d", len(calls), len(cases))
	}
	for _, c := range calls {
		if c.Write() || c.Status != 403 {
			t.Errorf("refused call recorded as %+v", c)
		}
	}
}

// TestErrorShapes: each service's error document, as its SDK parses it
// into the API error code (awsquery for ELB, ec2query for EC2), throttling
// included.
func TestErrorShapes(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	throttled := map[string]bool{}
	w.emu.Throttle(func(api, op string) bool { return throttled[op] })

	_, err := w.elb.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{TargetGroupArns: []string{"arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/x/1"}})
	var tgNotFound *elbv2types.TargetGroupNotFoundException
	if !errors.As(err, &tgNotFound) {
		t.Fatalf("missing target group: %v, want TargetGroupNotFoundException", err)
	}
	_, err = w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-missing"}})
	if got := apiCode(t, err); got != "InvalidInstanceID.NotFound" {
		t.Fatalf("missing instance: %q", got)
	}
	_, err = w.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("nodes"), VpcId: aws.String("vpc-1"), Description: aws.String("x")})
	if got := apiCode(t, err); got != "InvalidGroup.Duplicate" {
		t.Fatalf("duplicate group: %q", got)
	}

	throttled["DescribeLoadBalancers"], throttled["DescribeInstances"] = true, true
	_, err = w.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
	if got := apiCode(t, err); got != "Throttling" {
		t.Fatalf("ELB throttled: %q, want Throttling", got)
	}
	_, err = w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if got := apiCode(t, err); got != "RequestLimitExceeded" {
		t.Fatalf("EC2 throttled: %q, want RequestLimitExceeded", got)
	}
}

// TestEC2Discovery: what the CCM reads of EC2 to place an NLB and open
// the nodes' security group (aws.go findELBSubnets, describeInstances,
// getTaggedSecurityGroups, updateInstanceSecurityGroupForNLBTraffic).
func TestEC2Discovery(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	w.emu.AddInstance(awsapi.Instance{ID: "i-stopped", State: "stopped", AZ: "us-east-1a", PrivateDNSName: "node-stopped"})

	// All instances, paged as the CCM pages them (MaxResults, NextToken).
	var ids []string
	in := &ec2.DescribeInstancesInput{MaxResults: aws.Int32(2)}
	for {
		out, err := w.ec2.DescribeInstances(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				ids = append(ids, aws.ToString(i.InstanceId))
				if i.InstanceId != nil && *i.InstanceId == "i-a" && (aws.ToString(i.PrivateIpAddress) != "10.0.0.1" ||
					aws.ToString(i.Placement.AvailabilityZone) != "us-east-1a" || len(i.SecurityGroups) != 1 || len(i.Tags) != 1) {
					t.Errorf("i-a described as %+v", i)
				}
			}
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	if len(ids) != 4 {
		t.Fatalf("paged instances %v, want 4", ids)
	}
	// By node name and live state (aws.go findInstanceByNodeName).
	out, err := w.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("private-dns-name"), Values: []string{"node-i-b", "node-stopped"}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}}}})
	if err != nil || len(out.Reservations) != 1 || aws.ToString(out.Reservations[0].Instances[0].InstanceId) != "i-b" {
		t.Fatalf("filtered instances: %+v, %v", out, err)
	}
	subnets, err := w.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: aws.String("vpc-id"), Values: []string{"vpc-1"}}}})
	if err != nil || len(subnets.Subnets) != 2 || aws.ToString(subnets.Subnets[1].AvailabilityZone) != "us-east-1b" {
		t.Fatalf("subnets: %+v, %v", subnets, err)
	}
	rts, err := w.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{Filters: []ec2types.Filter{{Name: aws.String("vpc-id"), Values: []string{"vpc-1"}}}})
	if err != nil || len(rts.RouteTables) != 1 || !aws.ToBool(rts.RouteTables[0].Associations[0].Main) ||
		aws.ToString(rts.RouteTables[0].Routes[1].GatewayId) != "igw-1" {
		t.Fatalf("route tables: %+v, %v", rts, err)
	}
	zones, err := w.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil || len(zones.AvailabilityZones) != 2 || aws.ToString(zones.AvailabilityZones[0].ZoneType) != "availability-zone" {
		t.Fatalf("zones: %+v, %v", zones, err)
	}

	// Two rules for the same port from two ranges come back grouped, with
	// their descriptions, as the CCM's diff expects.
	rule := func(cidr string) ec2types.IpPermission {
		return ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(30080), ToPort: aws.Int32(30080),
			IpRanges: []ec2types.IpRange{{CidrIp: aws.String(cidr), Description: aws.String("kubernetes.io/rule/nlb/client=a0123")}}}
	}
	if _, err := w.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String("sg-nodes"),
		IpPermissions: []ec2types.IpPermission{rule("10.0.0.0/24"), rule("10.0.1.0/24")}}); err != nil {
		t.Fatal(err)
	}
	_, err = w.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String("sg-nodes"),
		IpPermissions: []ec2types.IpPermission{rule("10.0.0.0/24")}})
	if got := apiCode(t, err); got != "InvalidPermission.Duplicate" {
		t.Fatalf("a second identical rule: %q", got)
	}
	sgs, err := w.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{"sg-nodes"}})
	if err != nil || len(sgs.SecurityGroups) != 1 || len(sgs.SecurityGroups[0].IpPermissions) != 1 {
		t.Fatalf("security group: %+v, %v", sgs, err)
	}
	perm := sgs.SecurityGroups[0].IpPermissions[0]
	if len(perm.IpRanges) != 2 || aws.ToString(perm.IpRanges[1].Description) != "kubernetes.io/rule/nlb/client=a0123" || aws.ToInt32(perm.FromPort) != 30080 {
		t.Fatalf("permission %+v", perm)
	}
	// EC2 sends the empty source lists as empty elements, which the SDK
	// decodes as empty slices, not nil.
	if perm.UserIdGroupPairs == nil || perm.Ipv6Ranges == nil || perm.PrefixListIds == nil || len(perm.UserIdGroupPairs) != 0 {
		t.Fatalf("empty source lists decoded as %#v, %#v, %#v; want empty slices", perm.UserIdGroupPairs, perm.Ipv6Ranges, perm.PrefixListIds)
	}
	if _, err := w.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String("sg-nodes"),
		IpPermissions: []ec2types.IpPermission{rule("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	if rules := w.emu.SecurityGroupRules("sg-nodes"); len(rules) != 1 || rules[0].CIDR != "10.0.1.0/24" {
		t.Fatalf("rules after revoke: %+v", rules)
	}

	// Created groups carry their tags; CreateTags/DeleteTags change them.
	sg, err := w.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("k8s-ns-web"), VpcId: aws.String("vpc-1"),
		Description: aws.String("[k8s] Managed SecurityGroup for LoadBalancer"),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup,
			Tags: []ec2types.Tag{{Key: aws.String(cluster), Value: aws.String("owned")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{aws.ToString(sg.GroupId)},
		Tags: []ec2types.Tag{{Key: aws.String("extra"), Value: aws.String("1")}}}); err != nil {
		t.Fatal(err)
	}
	tagged, err := w.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
		{Name: aws.String("group-name"), Values: []string{"k8s-ns-web"}}, {Name: aws.String("vpc-id"), Values: []string{"vpc-1"}}}})
	if err != nil || len(tagged.SecurityGroups) != 1 || len(tagged.SecurityGroups[0].Tags) != 2 {
		t.Fatalf("created group by name: %+v, %v", tagged, err)
	}
	if _, err := w.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: sg.GroupId}); err != nil {
		t.Fatal(err)
	}
	_, err = w.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: aws.String("sg-nodes")})
	if got := apiCode(t, err); got != "DependencyViolation" {
		t.Fatalf("deleting a group instances use: %q", got)
	}
}
