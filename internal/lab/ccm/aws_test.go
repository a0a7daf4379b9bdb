package ccm_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/testutil/ccmworld"
)

const (
	awsCluster = "zd"
	awsVPC     = "vpc-0zerodrop"
	awsNS      = "aws"
)

var awsNodes = []ccm.AWSNode{
	{"node-a0", "i-0000000000000000a", "us-east-1a", "subnet-0a", "10.0.0.10"},
	{"node-a1", "i-0000000000000001a", "us-east-1a", "subnet-0a", "10.0.0.11"},
	{"node-b0", "i-0000000000000000b", "us-east-1b", "subnet-0b", "10.0.1.10"},
}

// awsWorld is a control plane, the AWS emulator on HTTPS holding the
// cluster's VPC and instances, a tripwire where the CCM's metadata client
// points, and the configuration of the CCM processes (base).
type awsWorld struct {
	*world // the Azure test's: its Clientset, NodeWithProviderID, ensured
	emu    *awsapi.Emulator
	elb    *elbv2.Client
	base   ccm.AWSConfig
	imds   atomic.Int64 // connections the metadata tripwire accepted
}

func newAWSWorld(t *testing.T) *awsWorld {
	t.Helper()
	bin, err := ccm.AWSBinary("")
	if err != nil {
		t.Fatal(err)
	}
	rc, dir, kc := ccmworld.StartControlPlane(t)
	w := &awsWorld{world: &world{World: &ccmworld.World{REST: rc, CS: kubernetes.NewForConfigOrDie(rc)}}}

	// The VPC as the CCM finds an internet-facing NLB's subnets in it,
	// and the nodes' instances (ccm.SeedAWS).
	w.emu = awsapi.New(awsapi.Options{})
	ccm.SeedAWS(w.emu, ccm.AWSCluster{ClusterID: awsCluster, VPC: awsVPC, CIDR: "10.0.0.0/16", Nodes: awsNodes,
		Subnets: []awsapi.Subnet{{ID: "subnet-0a", AZ: "us-east-1a", CIDR: "10.0.0.0/24"}, {ID: "subnet-0b", AZ: "us-east-1b", CIDR: "10.0.1.0/24"}}})
	for _, n := range awsNodes {
		w.NodeWithProviderID(t, n.Name, n.IP, n.ProviderID(), nil)
	}
	served, err := w.emu.ServeTLS(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = served.Close() })
	hc, err := served.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	// The test's own reads of the emulator, through the SDK the CCM uses.
	w.elb = elbv2.NewFromConfig(aws.Config{Region: awsapi.DefaultRegion, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: awsapi.AccessKeyID, SecretAccessKey: awsapi.SecretAccessKey}, nil
		})}, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(served.URL) })

	w.base = ccm.AWSConfig{Binary: bin, Dir: dir, Kubeconfig: kc, Emulator: served, Region: awsapi.DefaultRegion,
		Zone: "us-east-1a", VPC: awsVPC, Subnet: "subnet-0a", ClusterID: awsCluster, IMDS: w.tripwire(t)}
	if _, err := w.CS.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: awsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// tripwire listens on loopback where the CCM's metadata client is
// pointed and counts the connections it gets: none is the proof that the
// client, switched off, never called (and so never 169.254.169.254).
func (w *awsWorld) tripwire(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.imds.Add(1)
			_ = c.Close()
		}
	}()
	return "http://" + ln.Addr().String()
}

// start starts a CCM process named name; its log's tail is shown when the
// test fails.
func (w *awsWorld) start(t *testing.T, name string) (stop func()) {
	t.Helper()
	p, err := ccm.StartAWS(w.base, name)
	if err != nil {
		t.Fatal(err)
	}
	stop = func() { _ = p.Stop() }
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(ccm.LogPath(w.base.Dir, name))
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return stop
}

// nlbService creates a LoadBalancer Service of port 80 with an NLB of
// instance targets and the given traffic policy.
func (w *awsWorld) nlbService(t *testing.T, name string, policy corev1.ServiceExternalTrafficPolicy) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: awsNS,
		Annotations: map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			ExternalTrafficPolicy: policy,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if _, err := w.CS.CoreV1().Services(awsNS).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hostname waits for the Service's load-balancer hostname and returns the
// Service as it is then.
func (w *awsWorld) hostname(t *testing.T, name string) *corev1.Service {
	t.Helper()
	var svc *corev1.Service
	eventually(t, 3*time.Minute, name+"'s load-balancer hostname", func() error {
		s, err := w.CS.CoreV1().Services(awsNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 || s.Status.LoadBalancer.Ingress[0].Hostname == "" {
			return fmt.Errorf("status %+v", s.Status.LoadBalancer)
		}
		svc = s
		return nil
	})
	return svc
}

// nlb is what the emulator holds for one Service: its load balancer and
// the target group of its one port.
type nlb struct {
	lb elbv2types.LoadBalancer
	tg elbv2types.TargetGroup
}

// TestRealAWSCCM runs the real aws-cloud-controller-manager of
// k8s.io/cloud-provider-aws v1.37.1 against the real kube-apiserver and
// the AWS emulator: two Services with an NLB of instance targets, one
// externalTrafficPolicy Local and one Cluster, get a load balancer each,
// a target group for their port with the health check of their policy,
// every node registered and a hostname. The CCM is then restarted with
// nothing changed and what its sync writes is reported per policy
// (issue 52 asks whether ModifyTargetGroup is sent on every sync for
// Local). Anything of the AWS API the emulator serves differently enough
// for the CCM to notice — a shape, an error code, the signature, an
// operation it does not serve — fails it, as does any request to
// instance metadata.
func TestRealAWSCCM(t *testing.T) {
	w := newAWSWorld(t)
	ctx := context.Background()
	stop := w.start(t, "aws-ccm-1")
	policies := map[string]corev1.ServiceExternalTrafficPolicy{
		"local": corev1.ServiceExternalTrafficPolicyLocal, "cluster": corev1.ServiceExternalTrafficPolicyCluster}
	names := []string{"local", "cluster"}
	for _, name := range names {
		w.nlbService(t, name, policies[name])
	}
	svcs := map[string]*corev1.Service{}
	for _, name := range names {
		svcs[name] = w.hostname(t, name)
	}
	first, _ := w.emu.Calls(0)
	nlbs := w.checkNLBs(t, ctx, svcs)
	w.checkCalls(t, "first sync", first)
	w.checkLog(t, "aws-ccm-1")
	owner := owners(nlbs)
	t.Logf("first sync: writes by Service: %v", writesByOwner(first, owner))

	// A restart with nothing changed: the new process syncs every
	// Service (the informer's add), and its writes are what a restart
	// costs.
	stop()
	_, mark := w.emu.Calls(0) // after the test's own reads and the first process's last call
	before := map[string]int32{}
	for _, name := range names {
		before[name] = w.ensured(t, awsNS, name)
	}
	w.start(t, "aws-ccm-2")
	eventually(t, 3*time.Minute, "aws-ccm-2 has synced both Services", func() error {
		for _, name := range names {
			// The service controller reports every sync it finishes, and
			// logs the ones it starts: one more of each, by the new process.
			if n := w.ensured(t, awsNS, name); n <= before[name] {
				return fmt.Errorf("%s: %d EnsuredLoadBalancer events, as before the restart", name, n)
			}
			if n := w.logLines(t, "aws-ccm-2", "Ensuring load balancer for service "+awsNS+"/"+name); n == 0 {
				return fmt.Errorf("%s: aws-ccm-2 has not logged its sync", name)
			}
		}
		return nil
	})
	after, _ := w.emu.Calls(mark)
	w.checkCalls(t, "after the restart", after)
	w.checkLog(t, "aws-ccm-2")
	for name, ops := range writesByOwner(after, owner) {
		t.Logf("restart with nothing changed: %s writes %v", name, ops)
	}
	reads := map[string]int{}
	for _, c := range after {
		if !c.Write() {
			reads[c.API+" "+c.Operation]++
		}
	}
	t.Logf("restart with nothing changed: reads %v", reads)
	for _, c := range after {
		if c.Write() {
			t.Logf("after the restart: %s %s", c, brief(c))
		}
	}
	// What must hold whatever it writes: the same load balancers, each
	// Service's hostname unchanged, every node still registered.
	again := w.checkNLBs(t, ctx, svcs)
	for name, n := range nlbs {
		if aws.ToString(again[name].lb.LoadBalancerArn) != aws.ToString(n.lb.LoadBalancerArn) {
			t.Errorf("%s: load balancer %s after the restart, want %s kept", name,
				aws.ToString(again[name].lb.LoadBalancerArn), aws.ToString(n.lb.LoadBalancerArn))
		}
	}
	if n := w.imds.Load(); n != 0 {
		t.Errorf("instance metadata: %d connections, want none (AWS_EC2_METADATA_DISABLED)", n)
	}
}

// checkNLBs: one network load balancer per Service, whose DNS name is the
// Service's hostname, one TCP listener on port 80 forwarding to one
// target group of instance targets on the Service's node port, with the
// health check of its policy (aws.go buildNLBHealthCheckConfiguration at
// v1.37.1: Local HTTP /healthz on the health check node port every 10 s,
// thresholds 2; Cluster TCP to the traffic port every 30 s, thresholds 3),
// and every node's instance registered on the node port.
func (w *awsWorld) checkNLBs(t *testing.T, ctx context.Context, svcs map[string]*corev1.Service) map[string]nlb {
	t.Helper()
	lbs, err := w.elb.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs.LoadBalancers) != len(svcs) {
		t.Errorf("%d load balancers, want one per Service (%d)", len(lbs.LoadBalancers), len(svcs))
	}
	out := map[string]nlb{}
	for name, svc := range svcs {
		host := svc.Status.LoadBalancer.Ingress[0].Hostname
		i := slices.IndexFunc(lbs.LoadBalancers, func(lb elbv2types.LoadBalancer) bool { return aws.ToString(lb.DNSName) == host })
		if i < 0 {
			t.Errorf("%s: no load balancer named %s", name, host)
			continue
		}
		lb := lbs.LoadBalancers[i]
		if lb.Type != elbv2types.LoadBalancerTypeEnumNetwork || lb.Scheme != elbv2types.LoadBalancerSchemeEnumInternetFacing {
			t.Errorf("%s: load balancer %s %s, want an internet-facing network one", name, lb.Type, lb.Scheme)
		}
		tgs, err := w.elb.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: lb.LoadBalancerArn})
		if err != nil {
			t.Fatal(err)
		}
		if len(tgs.TargetGroups) != 1 {
			t.Errorf("%s: %d target groups, want one for its one port", name, len(tgs.TargetGroups))
			continue
		}
		tg := tgs.TargetGroups[0]
		out[name] = nlb{lb, tg}
		checkTargetGroup(t, name, svc, tg)
		ls, err := w.elb.DescribeListeners(ctx, &elbv2.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls.Listeners) != 1 || aws.ToInt32(ls.Listeners[0].Port) != 80 || ls.Listeners[0].Protocol != elbv2types.ProtocolEnumTcp ||
			len(ls.Listeners[0].DefaultActions) != 1 || aws.ToString(ls.Listeners[0].DefaultActions[0].TargetGroupArn) != aws.ToString(tg.TargetGroupArn) {
			t.Errorf("%s: listeners %+v, want one TCP 80 forwarding to %s", name, ls.Listeners, aws.ToString(tg.TargetGroupArn))
		}
		targets, err := w.emu.TargetHealth(aws.ToString(tg.TargetGroupArn))
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, s := range targets {
			got = append(got, fmt.Sprintf("%s:%d", s.Target.ID, s.Target.Port))
		}
		for _, n := range awsNodes {
			want = append(want, fmt.Sprintf("%s:%d", n.InstanceID, svc.Spec.Ports[0].NodePort))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: targets %v, want every node's instance on the node port %v", name, got, want)
		}
	}
	return out
}

func checkTargetGroup(t *testing.T, name string, svc *corev1.Service, tg elbv2types.TargetGroup) {
	t.Helper()
	if tg.TargetType != elbv2types.TargetTypeEnumInstance || tg.Protocol != elbv2types.ProtocolEnumTcp ||
		aws.ToInt32(tg.Port) != svc.Spec.Ports[0].NodePort {
		t.Errorf("%s: target group %s %s port %d, want TCP instance targets on node port %d",
			name, tg.TargetType, tg.Protocol, aws.ToInt32(tg.Port), svc.Spec.Ports[0].NodePort)
	}
	type check struct {
		protocol     elbv2types.ProtocolEnum
		port, path   string
		interval     int32
		healthy, bad int32
	}
	got := check{tg.HealthCheckProtocol, aws.ToString(tg.HealthCheckPort), aws.ToString(tg.HealthCheckPath),
		aws.ToInt32(tg.HealthCheckIntervalSeconds), aws.ToInt32(tg.HealthyThresholdCount), aws.ToInt32(tg.UnhealthyThresholdCount)}
	want := check{elbv2types.ProtocolEnumTcp, "traffic-port", "", 30, 3, 3}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		want = check{elbv2types.ProtocolEnumHttp, strconv.Itoa(int(svc.Spec.HealthCheckNodePort)), "/healthz", 10, 2, 2}
	}
	if got != want {
		t.Errorf("%s (%s): health check %+v, want %+v", name, svc.Spec.ExternalTrafficPolicy, got, want)
	}
}

// checkCalls: none of the CCM's calls was refused for something the
// emulator does not serve or for its signature or key; refusals the API
// makes as part of the CCM's reading (LoadBalancerNotFound on a first
// look-up) are logged.
func (w *awsWorld) checkCalls(t *testing.T, when string, calls []awsapi.Call) {
	t.Helper()
	for _, c := range calls {
		switch c.Error {
		case "":
		case "InvalidAction", "SignatureDoesNotMatch", "AuthFailure", "InvalidClientTokenId",
			"MissingAuthenticationToken", "RequestExpired", "InternalFailure":
			t.Errorf("%s: refused: %s %s", when, c, brief(c))
		default:
			t.Logf("%s: refused (as AWS would): %s %s", when, c, brief(c))
		}
	}
}
