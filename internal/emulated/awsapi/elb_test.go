package awsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

// The classic ELB API through aws-sdk-go-v2's elasticloadbalancing client
// (v1.29.3, the one cloud-provider-aws v1.37.1 builds with), on the same
// endpoint as ELBv2 and EC2.

func (w *world) classic(opts ...func(*elb.Options)) *elb.Client {
	return elb.NewFromConfig(w.cfg, append([]func(*elb.Options){func(o *elb.Options) { o.BaseEndpoint = aws.String(w.url) }}, opts...)...)
}

// TestClassicRoundTrip makes what the CCM makes for a Service without the
// NLB annotation, in its order (aws_loadbalancer.go ensureLoadBalancer,
// ensureLoadBalancerHealthCheck, ensureLoadBalancerInstances), and reads
// each step back.
func TestClassicRoundTrip(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	c := w.classic()
	const name = "a0123"

	// Not found is an error the CCM recognises by its code (aws.go
	// describeLoadBalancer), the SDK by its type.
	_, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}})
	var notFound *elbtypes.AccessPointNotFoundException
	if !errors.As(err, &notFound) || notFound.ErrorCode() != "LoadBalancerNotFound" {
		t.Fatalf("DescribeLoadBalancers of a missing ELB: %v, want AccessPointNotFoundException (LoadBalancerNotFound)", err)
	}
	created, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{LoadBalancerName: aws.String(name),
		Listeners: []elbtypes.Listener{{Protocol: aws.String("tcp"), LoadBalancerPort: 80, InstanceProtocol: aws.String("tcp"), InstancePort: aws.Int32(31000)}},
		Subnets:   []string{"subnet-a", "subnet-b"}, SecurityGroups: []string{"sg-nodes"},
		Tags: []elbtypes.Tag{{Key: aws.String(cluster), Value: aws.String("owned")}, {Key: aws.String("kubernetes.io/service-name"), Value: aws.String("ns/svc")}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(aws.ToString(created.DNSName), name+"-") || !strings.HasSuffix(aws.ToString(created.DNSName), ".us-east-1.elb.amazonaws.com") {
		t.Errorf("DNS name %q, want %s-….us-east-1.elb.amazonaws.com", aws.ToString(created.DNSName), name)
	}
	_, err = c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{LoadBalancerName: aws.String(name), Subnets: []string{"subnet-a"},
		Listeners: []elbtypes.Listener{{Protocol: aws.String("tcp"), LoadBalancerPort: 80, InstancePort: aws.Int32(31000)}}})
	var dup *elbtypes.DuplicateAccessPointNameException
	if !errors.As(err, &dup) {
		t.Errorf("second CreateLoadBalancer of %s: %v, want DuplicateAccessPointNameException", name, err)
	}

	lb := describeClassic(t, c, name)
	l := lb.ListenerDescriptions
	if len(l) != 1 || aws.ToString(l[0].Listener.Protocol) != "TCP" || l[0].Listener.LoadBalancerPort != 80 ||
		aws.ToString(l[0].Listener.InstanceProtocol) != "TCP" || aws.ToInt32(l[0].Listener.InstancePort) != 31000 {
		t.Errorf("listeners %s, want TCP 80 → TCP 31000", dump(l))
	}
	if aws.ToString(lb.DNSName) != aws.ToString(created.DNSName) || aws.ToString(lb.VPCId) != "vpc-1" || aws.ToString(lb.Scheme) != "internet-facing" ||
		!slices.Equal(lb.Subnets, []string{"subnet-a", "subnet-b"}) || !slices.Equal(lb.AvailabilityZones, []string{"us-east-1a", "us-east-1b"}) ||
		!slices.Equal(lb.SecurityGroups, []string{"sg-nodes"}) || aws.ToString(lb.SourceSecurityGroup.GroupName) != "nodes" {
		t.Errorf("load balancer %s", dump(lb))
	}
	// The CCM dereferences the health check of every ELB it reads
	// (ensureLoadBalancerHealthCheck): one made without it has AWS's default.
	if hc := lb.HealthCheck; hc == nil || aws.ToString(hc.Target) != "TCP:31000" || aws.ToInt32(hc.Interval) != 30 ||
		aws.ToInt32(hc.Timeout) != 5 || aws.ToInt32(hc.UnhealthyThreshold) != 2 || aws.ToInt32(hc.HealthyThreshold) != 10 {
		t.Errorf("default health check %s", dump(lb.HealthCheck))
	}

	// Attributes: the CCM's desired set (aws.go:2580) written, then read
	// back as AWS keeps it — the draining timeout and the desync mode stay.
	desired := &elbtypes.LoadBalancerAttributes{AccessLog: &elbtypes.AccessLog{Enabled: false},
		ConnectionDraining: &elbtypes.ConnectionDraining{Enabled: false}, ConnectionSettings: &elbtypes.ConnectionSettings{IdleTimeout: aws.Int32(60)},
		CrossZoneLoadBalancing: &elbtypes.CrossZoneLoadBalancing{Enabled: false}}
	if _, err := c.ModifyLoadBalancerAttributes(ctx, &elb.ModifyLoadBalancerAttributesInput{LoadBalancerName: aws.String(name), LoadBalancerAttributes: desired}); err != nil {
		t.Fatal(err)
	}
	attrs, err := c.DescribeLoadBalancerAttributes(ctx, &elb.DescribeLoadBalancerAttributesInput{LoadBalancerName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	a := attrs.LoadBalancerAttributes
	if a.ConnectionDraining == nil || a.ConnectionDraining.Enabled || aws.ToInt32(a.ConnectionDraining.Timeout) != 300 ||
		aws.ToInt32(a.ConnectionSettings.IdleTimeout) != 60 || a.CrossZoneLoadBalancing.Enabled || a.AccessLog.Enabled ||
		len(a.AdditionalAttributes) != 1 || aws.ToString(a.AdditionalAttributes[0].Key) != "elb.http.desyncmitigationmode" ||
		aws.ToString(a.AdditionalAttributes[0].Value) != "defensive" {
		t.Errorf("attributes after the CCM's write %s", dump(a))
	}
	if reflect.DeepEqual(desired, a) {
		t.Errorf("attributes read back equal the CCM's desired set: the draining timeout was dropped")
	}

	// The health check of a Local Service, then one AWS refuses.
	hc := &elbtypes.HealthCheck{Target: aws.String("HTTP:32000/healthz"), Interval: aws.Int32(10), Timeout: aws.Int32(5),
		UnhealthyThreshold: aws.Int32(6), HealthyThreshold: aws.Int32(2)}
	if _, err := c.ConfigureHealthCheck(ctx, &elb.ConfigureHealthCheckInput{LoadBalancerName: aws.String(name), HealthCheck: hc}); err != nil {
		t.Fatal(err)
	}
	bad := *hc
	bad.Timeout = aws.Int32(10)
	_, err = c.ConfigureHealthCheck(ctx, &elb.ConfigureHealthCheckInput{LoadBalancerName: aws.String(name), HealthCheck: &bad})
	if got := apiCode(t, err); got != "ValidationError" {
		t.Errorf("health check timeout = interval: %q, want ValidationError", got)
	}
	if got := describeClassic(t, c, name).HealthCheck; aws.ToString(got.Target) != "HTTP:32000/healthz" || aws.ToInt32(got.Interval) != 10 ||
		aws.ToInt32(got.UnhealthyThreshold) != 6 || aws.ToInt32(got.HealthyThreshold) != 2 {
		t.Errorf("health check %s, want the one configured", dump(got))
	}

	// Instances: registered once each, deregistered, unknown refused.
	reg, err := c.RegisterInstancesWithLoadBalancer(ctx, &elb.RegisterInstancesWithLoadBalancerInput{LoadBalancerName: aws.String(name),
		Instances: []elbtypes.Instance{{InstanceId: aws.String("i-a")}, {InstanceId: aws.String("i-b")}, {InstanceId: aws.String("i-a")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := instanceIDs(reg.Instances); !slices.Equal(got, []string{"i-a", "i-b"}) {
		t.Errorf("registered %v, want [i-a i-b]", got)
	}
	dereg, err := c.DeregisterInstancesFromLoadBalancer(ctx, &elb.DeregisterInstancesFromLoadBalancerInput{LoadBalancerName: aws.String(name),
		Instances: []elbtypes.Instance{{InstanceId: aws.String("i-a")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := instanceIDs(dereg.Instances); !slices.Equal(got, []string{"i-b"}) {
		t.Errorf("left after deregistering i-a: %v", got)
	}
	_, err = c.RegisterInstancesWithLoadBalancer(ctx, &elb.RegisterInstancesWithLoadBalancerInput{LoadBalancerName: aws.String(name),
		Instances: []elbtypes.Instance{{InstanceId: aws.String("i-missing")}}})
	var invalid *elbtypes.InvalidEndPointException
	if !errors.As(err, &invalid) {
		t.Errorf("registering an unknown instance: %v, want InvalidEndPointException (InvalidInstance)", err)
	}
	if got := instanceIDs(describeClassic(t, c, name).Instances); !slices.Equal(got, []string{"i-b"}) {
		t.Errorf("described instances %v, want [i-b]", got)
	}

	// Deleting twice succeeds; then it is gone.
	for range 2 {
		if _, err := c.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerName: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}}); !errors.As(err, &notFound) {
		t.Errorf("after DeleteLoadBalancer: %v, want not found", err)
	}
}

func describeClassic(t *testing.T, c *elb.Client, name string) elbtypes.LoadBalancerDescription {
	t.Helper()
	out, err := c.DescribeLoadBalancers(context.Background(), &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.LoadBalancerDescriptions) != 1 {
		t.Fatalf("%d load balancers named %s", len(out.LoadBalancerDescriptions), name)
	}
	return out.LoadBalancerDescriptions[0]
}

func instanceIDs(in []elbtypes.Instance) []string {
	var out []string
	for _, i := range in {
		out = append(out, aws.ToString(i.InstanceId))
	}
	slices.Sort(out)
	return out
}

// TestClassicPoliciesAndTags: the proxy-protocol policy the CCM creates on
// every sync with the annotation (aws_loadbalancer.go createProxyProtocolPolicy)
// is accepted again unchanged, another policy of its name is not; backend
// and listener policies; tags added, described and removed.
func TestClassicPoliciesAndTags(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	c := w.classic()
	name := aws.String("a0456")
	if _, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{LoadBalancerName: name, Subnets: []string{"subnet-a"},
		Listeners: []elbtypes.Listener{{Protocol: aws.String("tcp"), LoadBalancerPort: 443, InstanceProtocol: aws.String("tcp"), InstancePort: aws.Int32(31443)}}}); err != nil {
		t.Fatal(err)
	}
	proxy := &elb.CreateLoadBalancerPolicyInput{LoadBalancerName: name, PolicyName: aws.String("k8s-proxyprotocol-enabled"),
		PolicyTypeName:   aws.String("ProxyProtocolPolicyType"),
		PolicyAttributes: []elbtypes.PolicyAttribute{{AttributeName: aws.String("ProxyProtocol"), AttributeValue: aws.String("true")}}}
	for i := range 2 {
		if _, err := c.CreateLoadBalancerPolicy(ctx, proxy); err != nil {
			t.Fatalf("CreateLoadBalancerPolicy #%d: %v", i+1, err)
		}
	}
	other := *proxy
	other.PolicyAttributes = []elbtypes.PolicyAttribute{{AttributeName: aws.String("ProxyProtocol"), AttributeValue: aws.String("false")}}
	_, err := c.CreateLoadBalancerPolicy(ctx, &other)
	var dupPolicy *elbtypes.DuplicatePolicyNameException
	if !errors.As(err, &dupPolicy) {
		t.Errorf("a different policy of the same name: %v, want DuplicatePolicyNameException", err)
	}
	_, err = c.SetLoadBalancerPoliciesForBackendServer(ctx, &elb.SetLoadBalancerPoliciesForBackendServerInput{LoadBalancerName: name,
		InstancePort: aws.Int32(31443), PolicyNames: []string{"missing"}})
	var noPolicy *elbtypes.PolicyNotFoundException
	if !errors.As(err, &noPolicy) {
		t.Errorf("setting a missing policy: %v, want PolicyNotFoundException", err)
	}
	if _, err := c.SetLoadBalancerPoliciesForBackendServer(ctx, &elb.SetLoadBalancerPoliciesForBackendServerInput{LoadBalancerName: name,
		InstancePort: aws.Int32(31443), PolicyNames: []string{"k8s-proxyprotocol-enabled"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLoadBalancerPoliciesOfListener(ctx, &elb.SetLoadBalancerPoliciesOfListenerInput{LoadBalancerName: name,
		LoadBalancerPort: 443, PolicyNames: []string{"k8s-proxyprotocol-enabled"}}); err != nil {
		t.Fatal(err)
	}
	lb := describeClassic(t, c, *name)
	if b := lb.BackendServerDescriptions; len(b) != 1 || aws.ToInt32(b[0].InstancePort) != 31443 || !slices.Equal(b[0].PolicyNames, []string{"k8s-proxyprotocol-enabled"}) {
		t.Errorf("backend policies %s", dump(b))
	}
	if l := lb.ListenerDescriptions; len(l) != 1 || !slices.Equal(l[0].PolicyNames, []string{"k8s-proxyprotocol-enabled"}) {
		t.Errorf("listener policies %s", dump(l))
	}
	if lb.Policies == nil || !slices.Equal(lb.Policies.OtherPolicies, []string{"k8s-proxyprotocol-enabled"}) {
		t.Errorf("policies %s", dump(lb.Policies))
	}
	pols, err := c.DescribeLoadBalancerPolicies(ctx, &elb.DescribeLoadBalancerPoliciesInput{LoadBalancerName: name, PolicyNames: []string{"k8s-proxyprotocol-enabled"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pols.PolicyDescriptions) != 1 || aws.ToString(pols.PolicyDescriptions[0].PolicyTypeName) != "ProxyProtocolPolicyType" ||
		len(pols.PolicyDescriptions[0].PolicyAttributeDescriptions) != 1 || aws.ToString(pols.PolicyDescriptions[0].PolicyAttributeDescriptions[0].AttributeValue) != "true" {
		t.Errorf("policy descriptions %s", dump(pols.PolicyDescriptions))
	}
	// An empty list takes the backend's policies away (proxy protocol off).
	if _, err := c.SetLoadBalancerPoliciesForBackendServer(ctx, &elb.SetLoadBalancerPoliciesForBackendServerInput{LoadBalancerName: name,
		InstancePort: aws.Int32(31443), PolicyNames: []string{}}); err != nil {
		t.Fatal(err)
	}
	if b := describeClassic(t, c, *name).BackendServerDescriptions; len(b) != 0 {
		t.Errorf("backend policies after clearing them: %s", dump(b))
	}

	if _, err := c.AddTags(ctx, &elb.AddTagsInput{LoadBalancerNames: []string{*name},
		Tags: []elbtypes.Tag{{Key: aws.String("team"), Value: aws.String("zd")}, {Key: aws.String("env"), Value: aws.String("lab")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveTags(ctx, &elb.RemoveTagsInput{LoadBalancerNames: []string{*name}, Tags: []elbtypes.TagKeyOnly{{Key: aws.String("env")}}}); err != nil {
		t.Fatal(err)
	}
	tags, err := c.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: []string{*name}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tags.TagDescriptions) != 1 || len(tags.TagDescriptions[0].Tags) != 1 || aws.ToString(tags.TagDescriptions[0].Tags[0].Key) != "team" {
		t.Errorf("tags %s, want team=zd alone", dump(tags.TagDescriptions))
	}
}

// TestClassicBesideELBv2: the two ELB APIs on one endpoint and one
// signing name keep apart by version (a classic ELB is no NLB); the
// classic one signs as elasticloadbalancing, throttles with Throttling,
// answers in its own namespace, and is recorded as "elb".
func TestClassicBesideELBv2(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	c := w.classic()
	if _, err := c.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{LoadBalancerName: aws.String("a0789"), Subnets: []string{"subnet-a"},
		Listeners: []elbtypes.Listener{{Protocol: aws.String("tcp"), LoadBalancerPort: 80, InstancePort: aws.Int32(31000)}}}); err != nil {
		t.Fatal(err)
	}
	v2, err := w.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(v2.LoadBalancers) != 0 {
		t.Errorf("ELBv2 lists %d load balancers, want none (the one made is classic)", len(v2.LoadBalancers))
	}
	calls, _ := w.emu.Calls(0)
	if len(calls) != 2 || calls[0].API != "elb" || calls[0].Operation != "CreateLoadBalancer" || calls[1].API != "elasticloadbalancing" {
		t.Errorf("calls %v, want the classic create as elb, then ELBv2's describe", calls)
	}

	_, err = w.classic(elb.WithSigV4SigningName("ec2")).DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if got := apiCode(t, err); got != "SignatureDoesNotMatch" {
		t.Errorf("classic ELB signed as ec2: %q, want SignatureDoesNotMatch", got)
	}
	w.emu.Throttle(func(api, op string) bool { return api == "elb" })
	_, err = c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if got := apiCode(t, err); got != "Throttling" {
		t.Errorf("classic ELB throttled: %q, want Throttling", got)
	}
	if _, err := w.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{}); err != nil {
		t.Errorf("ELBv2 throttled with the classic API: %v", err)
	}

	// An unsigned request's error document, as the wire has it.
	resp, err := w.hc.Do(mustRequest(t, w.url, url.Values{"Action": {"DescribeLoadBalancers"}, "Version": {"2012-06-01"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `xmlns="http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/"`) ||
		!strings.Contains(string(body), "<Code>MissingAuthenticationToken</Code>") {
		t.Errorf("unsigned classic request answered %d %s", resp.StatusCode, body)
	}
}

func mustRequest(t *testing.T, u string, form url.Values) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
