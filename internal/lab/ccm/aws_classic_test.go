package ccm_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// Issue 52 asks for "the classic ELB's writes per restart counted": the
// real cloud-provider-aws v1.37.1 against the emulator's classic ELB API,
// a Service of each policy without the NLB annotation (and one with the
// proxy-protocol and additional-tags annotations, the case the issue's
// "classic ELBs rewrite policies and tags every sync" is about), synced
// once and then again by a restarted process with nothing changed.

// classicSvc is one Service of the test: its policy and annotations.
type classicSvc struct {
	name        string
	policy      corev1.ServiceExternalTrafficPolicy
	annotations map[string]string
}

var classicSvcs = []classicSvc{
	{"local", corev1.ServiceExternalTrafficPolicyLocal, nil},
	{"cluster", corev1.ServiceExternalTrafficPolicyCluster, nil},
	{"annotated", corev1.ServiceExternalTrafficPolicyCluster, map[string]string{
		"service.beta.kubernetes.io/aws-load-balancer-proxy-protocol":           "*",
		"service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags": "team=zd,env=lab"}},
}

// wantRestartWrites is what the second EnsureLoadBalancer of each Service
// writes with nothing changed, by operation, as the CCM's code reads and
// this test observed (docs/aws.md):
//   - ModifyLoadBalancerAttributes for every classic ELB, whatever AWS
//     describes: the CCM compares its desired *LoadBalancerAttributes by
//     reflect.DeepEqual with &describeAttributesOutput.LoadBalancerAttributes
//     (aws_loadbalancer.go:1414-1417), a **LoadBalancerAttributes, and
//     values of two types are never deeply equal. (The emulator made to
//     describe exactly the desired set still got the write.)
//   - with proxy protocol on, CreateLoadBalancerPolicy on every sync
//     (aws_loadbalancer.go:1328-1337, "this will issue an API request
//     every time"), and with additional tags, AddTags on every sync
//     (:1389-1399). The backend policy, listeners, health check,
//     instances and security group rules are diffed and left alone.
var wantRestartWrites = map[string]map[string]int{
	"local":     {"ModifyLoadBalancerAttributes": 1},
	"cluster":   {"ModifyLoadBalancerAttributes": 1},
	"annotated": {"ModifyLoadBalancerAttributes": 1, "CreateLoadBalancerPolicy": 1, "AddTags": 1},
}

// TestRealAWSCCMClassic: the first sync makes each Service the classic
// ELB the CCM asks for (checkClassic); the second, by a restarted CCM
// with nothing changed, writes exactly wantRestartWrites, each call of it
// logged.
func TestRealAWSCCMClassic(t *testing.T) {
	w := newAWSWorld(t)
	hc, err := w.base.Emulator.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	cfg := aws.Config{Region: w.base.Region, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: awsapi.AccessKeyID, SecretAccessKey: awsapi.SecretAccessKey}, nil
		})}
	c := elb.NewFromConfig(cfg, func(o *elb.Options) { o.BaseEndpoint = aws.String(w.base.Emulator.URL) })
	e2 := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(w.base.Emulator.URL) })

	stop := w.start(t, "aws-classic-1")
	for _, s := range classicSvcs {
		w.classicService(t, s)
	}
	svcs := map[string]*corev1.Service{}
	for _, s := range classicSvcs {
		svcs[s.name] = w.hostname(t, s.name)
	}
	first, _ := w.emu.Calls(0)
	w.checkCalls(t, "first sync", first)
	w.checkLog(t, "aws-classic-1")
	owner := map[string]string{}
	for _, s := range classicSvcs {
		lb, sg := w.checkClassic(t, c, e2, s, svcs[s.name])
		owner[lb], owner[sg] = s.name, s.name
	}
	t.Logf("first sync: writes by Service: %v", writesByOwner(first, owner))
	if t.Failed() {
		t.FailNow() // the second sync's count means nothing on a wrong first one
	}

	stop()
	_, mark := w.emu.Calls(0)
	before := map[string]int32{}
	for _, s := range classicSvcs {
		before[s.name] = w.ensured(t, awsNS, s.name)
	}
	w.start(t, "aws-classic-2")
	eventually(t, 3*time.Minute, "aws-classic-2 has synced every Service", func() error {
		for _, s := range classicSvcs {
			if n := w.ensured(t, awsNS, s.name); n <= before[s.name] {
				return fmt.Errorf("%s: %d EnsuredLoadBalancer events, as before the restart", s.name, n)
			}
			if n := w.logLines(t, "aws-classic-2", "Ensuring load balancer for service "+awsNS+"/"+s.name); n == 0 {
				return fmt.Errorf("%s: aws-classic-2 has not logged its sync", s.name)
			}
		}
		return nil
	})
	after, _ := w.emu.Calls(mark)
	w.checkCalls(t, "after the restart", after)
	w.checkLog(t, "aws-classic-2")
	for _, call := range after {
		kind := "read"
		if call.Write() {
			kind = "WRITE"
		}
		t.Logf("second sync: %s %s %s%s", kind, call.API, call.Operation, brief(call))
	}
	got := writesByOwner(after, owner)
	for _, s := range classicSvcs {
		t.Logf("restart with nothing changed: %s (%s%s) writes %v", s.name, s.policy, annotated(s), got[s.name])
		if !maps.Equal(got[s.name], wantRestartWrites[s.name]) {
			t.Errorf("%s: the second sync wrote %v, want %v", s.name, got[s.name], wantRestartWrites[s.name])
		}
	}
	if len(got["shared"]) > 0 {
		t.Errorf("writes naming no Service's load balancer or group: %v", got["shared"])
	}
	// Whatever it writes, the same load balancers stay, as they were made.
	for _, s := range classicSvcs {
		w.checkClassic(t, c, e2, s, svcs[s.name])
	}
	if n := w.imds.Load(); n != 0 {
		t.Errorf("instance metadata: %d connections, want none", n)
	}
}

func annotated(s classicSvc) string {
	if len(s.annotations) == 0 {
		return ""
	}
	return ", proxy protocol and additional tags"
}

// classicService creates a LoadBalancer Service of port 80 without the
// NLB annotation: the CCM's default, a classic ELB.
func (w *awsWorld) classicService(t *testing.T, s classicSvc) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: awsNS, Annotations: s.annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": s.name},
			ExternalTrafficPolicy: s.policy,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if _, err := w.CS.CoreV1().Services(awsNS).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkClassic: the Service's classic ELB is what the CCM asks for
// (aws.go EnsureLoadBalancer at v1.37.1): named a<UID without dashes>,
// its DNS name the Service's hostname, one TCP listener from 80 to the
// node port, one public subnet per zone, its own security group
// k8s-elb-<name> open on 80 (and ICMP 3-4) to 0.0.0.0/0 and let into the
// nodes' group, the health check per policy (Local HTTP /healthz on the
// health check node port, Cluster TCP to the node port; every 10 s,
// timeout 5, healthy 2, unhealthy 6: aws_loadbalancer.go:66-69), every
// node registered, the cluster and service-name tags (and the additional
// ones), the attributes it asks for, proxy protocol on the node port when
// annotated. It returns the load balancer's name and group.
func (w *awsWorld) checkClassic(t *testing.T, c *elb.Client, e2 *ec2.Client, s classicSvc, svc *corev1.Service) (name, sgID string) {
	t.Helper()
	ctx := context.Background()
	name = "a" + strings.ReplaceAll(string(svc.UID), "-", "")
	name = name[:min(len(name), 32)]
	out, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{name}})
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	lb := out.LoadBalancerDescriptions[0]
	nodePort := svc.Spec.Ports[0].NodePort
	if host := svc.Status.LoadBalancer.Ingress[0].Hostname; aws.ToString(lb.DNSName) != host {
		t.Errorf("%s: load balancer %s's DNS name %s, the Service's hostname %s", s.name, name, aws.ToString(lb.DNSName), host)
	}
	if l := lb.ListenerDescriptions; len(l) != 1 || !strings.EqualFold(aws.ToString(l[0].Listener.Protocol), "tcp") ||
		l[0].Listener.LoadBalancerPort != 80 || aws.ToInt32(l[0].Listener.InstancePort) != nodePort {
		t.Errorf("%s: listeners %s, want TCP 80 → node port %d", s.name, dump(l), nodePort)
	}
	if aws.ToString(lb.Scheme) != "internet-facing" || !slices.Equal(sorted(lb.Subnets), []string{"subnet-0a", "subnet-0b"}) {
		t.Errorf("%s: scheme %s subnets %v, want internet-facing in subnet-0a and subnet-0b", s.name, aws.ToString(lb.Scheme), lb.Subnets)
	}
	wantHC := elbtypes.HealthCheck{Target: aws.String(fmt.Sprintf("TCP:%d", nodePort)), Interval: aws.Int32(10), Timeout: aws.Int32(5),
		HealthyThreshold: aws.Int32(2), UnhealthyThreshold: aws.Int32(6)}
	if s.policy == corev1.ServiceExternalTrafficPolicyLocal {
		wantHC.Target = aws.String("HTTP:" + strconv.Itoa(int(svc.Spec.HealthCheckNodePort)) + "/healthz")
	}
	if dump(lb.HealthCheck) != dump(&wantHC) {
		t.Errorf("%s: health check %s, want %s", s.name, dump(lb.HealthCheck), dump(&wantHC))
	}
	var ids []string
	for _, i := range lb.Instances {
		ids = append(ids, aws.ToString(i.InstanceId))
	}
	var want []string
	for _, n := range awsNodes {
		want = append(want, n.InstanceID)
	}
	if !slices.Equal(sorted(ids), sorted(want)) {
		t.Errorf("%s: instances %v, want every node's %v", s.name, ids, want)
	}
	proxy := len(lb.BackendServerDescriptions) == 1 && aws.ToInt32(lb.BackendServerDescriptions[0].InstancePort) == nodePort &&
		slices.Equal(lb.BackendServerDescriptions[0].PolicyNames, []string{"k8s-proxyprotocol-enabled"})
	if s.annotations != nil && !proxy || s.annotations == nil && len(lb.BackendServerDescriptions) > 0 {
		t.Errorf("%s: backend policies %s, want proxy protocol on node port %d only when annotated", s.name, dump(lb.BackendServerDescriptions), nodePort)
	}
	w.checkClassicTags(t, c, s, name)
	w.checkClassicAttributes(t, c, s, name)
	if len(lb.SecurityGroups) != 1 {
		t.Fatalf("%s: security groups %v, want the one the CCM makes", s.name, lb.SecurityGroups)
	}
	sgID = lb.SecurityGroups[0]
	sgs, err := e2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{sgID, ccm.AWSNodesGroup}})
	if err != nil {
		t.Fatal(err)
	}
	var open, icmp, fromLB bool
	for _, g := range sgs.SecurityGroups {
		for _, p := range g.IpPermissions {
			switch {
			case aws.ToString(g.GroupId) == sgID && aws.ToString(p.IpProtocol) == "tcp" && aws.ToInt32(p.FromPort) == 80 && aws.ToInt32(p.ToPort) == 80:
				open = len(p.IpRanges) == 1 && aws.ToString(p.IpRanges[0].CidrIp) == "0.0.0.0/0"
			case aws.ToString(g.GroupId) == sgID && aws.ToString(p.IpProtocol) == "icmp":
				icmp = aws.ToInt32(p.FromPort) == 3 && aws.ToInt32(p.ToPort) == 4
			case aws.ToString(g.GroupId) == ccm.AWSNodesGroup && aws.ToString(p.IpProtocol) == "-1":
				for _, pair := range p.UserIdGroupPairs {
					fromLB = fromLB || aws.ToString(pair.GroupId) == sgID
				}
			}
		}
		if aws.ToString(g.GroupId) == sgID && aws.ToString(g.GroupName) != "k8s-elb-"+name {
			t.Errorf("%s: the load balancer's group is named %s, want k8s-elb-%s", s.name, aws.ToString(g.GroupName), name)
		}
	}
	if !open || !icmp || !fromLB {
		t.Errorf("%s: TCP 80 from anywhere %v, ICMP 3-4 %v, the nodes' group open to %s %v; want all", s.name, open, icmp, sgID, fromLB)
	}
	return name, sgID
}

func (w *awsWorld) checkClassicTags(t *testing.T, c *elb.Client, s classicSvc, name string) {
	t.Helper()
	out, err := c.DescribeTags(context.Background(), &elb.DescribeTagsInput{LoadBalancerNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range out.TagDescriptions {
		for _, tag := range d.Tags {
			got[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
		}
	}
	want := map[string]string{"kubernetes.io/cluster/" + awsCluster: "owned", "kubernetes.io/service-name": awsNS + "/" + s.name}
	if s.annotations != nil {
		want["team"], want["env"] = "zd", "lab"
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: tags %v, want %v", s.name, got, want)
	}
}

// checkClassicAttributes: what the CCM asks for without annotations
// (aws.go:2579-2584) — access logs, draining and cross-zone off, idle
// timeout 60 s.
func (w *awsWorld) checkClassicAttributes(t *testing.T, c *elb.Client, s classicSvc, name string) {
	t.Helper()
	out, err := c.DescribeLoadBalancerAttributes(context.Background(), &elb.DescribeLoadBalancerAttributesInput{LoadBalancerName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	a := out.LoadBalancerAttributes
	if a == nil || a.AccessLog == nil || a.AccessLog.Enabled || a.ConnectionDraining == nil || a.ConnectionDraining.Enabled ||
		a.CrossZoneLoadBalancing == nil || a.CrossZoneLoadBalancing.Enabled || a.ConnectionSettings == nil || aws.ToInt32(a.ConnectionSettings.IdleTimeout) != 60 {
		t.Errorf("%s: attributes %s, want access logs, draining and cross-zone off, idle timeout 60", s.name, dump(a))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
