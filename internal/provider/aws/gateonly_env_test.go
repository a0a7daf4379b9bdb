package aws_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/model"
	zdaws "zerodrop.dev/zerodrop/internal/provider/aws"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const (
	cluster = "zd-test"
	vpc     = "vpc-0zd"
	// speed is how much faster than the wall clock the emulator's runs:
	// its health checks every 10 s (the CCM's for Local) take half a
	// second, its registration delay (60 s) three.
	speed = 20
	// propagation is --aws-propagation in the test (wall clock: the
	// provider's own).
	propagation = 3 * time.Second
)

// TestGateOnlyNLB runs `zerodrop controller --provider aws` (controller.Build
// with the AWS flags, the emulator as --aws-endpoint over HTTPS) on the
// real apiserver, with a gate-only externalTrafficPolicy Local Service
// whose NLB, listener and target group are made as cloud-provider-aws
// v1.37.1 makes them (its name, tags, health check; two nodes registered,
// a third not): the readiness gate opens for the pod whose node is
// registered and stays closed for the pod on the unregistered node; the
// registered pod, its node's last, is deleted and its termination gate
// holds while the node's target is healthy, and answers drained only once
// DescribeTargetHealth has had it unhealthy for --aws-propagation; and
// zerodrop made no write to AWS, nor to the Service.
func TestGateOnlyNLB(t *testing.T) {
	env, err := controlplane.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	rc := env.Config
	c := testutil.Client(t, rc)
	ctx := context.Background()
	ns := "gate-only-nlb"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// The emulator, its clock running speed times the wall clock's; node
	// health checks answer from up.
	start := time.Now()
	var mu sync.Mutex
	up := map[string]bool{"10.0.1.4": true, "10.0.1.5": true, "10.0.1.9": true}
	setUp := func(ip string, ok bool) { mu.Lock(); up[ip] = ok; mu.Unlock() }
	emu := awsapi.New(awsapi.Options{
		Now: func() time.Time { return start.Add(speed * time.Since(start)) },
		Probe: func(p awsapi.ProbeRequest, _ time.Time) awsapi.CheckResult {
			mu.Lock()
			defer mu.Unlock()
			if up[p.IP] {
				return awsapi.CheckResult{OK: true, HTTPCode: 200}
			}
			return awsapi.CheckResult{HTTPCode: 503}
		}})
	emu.AddSubnet(awsapi.Subnet{ID: "subnet-0a", VPCID: vpc, AZ: "us-east-1a", CIDR: "10.0.1.0/24",
		Tags: map[string]string{"kubernetes.io/cluster/" + cluster: "shared", "kubernetes.io/role/elb": "1"}})
	nodes := map[string]struct{ id, ip string }{"n1": {"i-0n1", "10.0.1.4"}, "n2": {"i-0n2", "10.0.1.5"}, "n9": {"i-0n9", "10.0.1.9"}}
	for name, n := range nodes {
		emu.AddInstance(awsapi.Instance{ID: n.id, PrivateIP: n.ip, SubnetID: "subnet-0a", VPCID: vpc, AZ: "us-east-1a",
			Tags: map[string]string{"kubernetes.io/cluster/" + cluster: "owned", "Name": name}})
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + n.id}}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
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
	awsCfg := aws.Config{Region: awsapi.DefaultRegion, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: awsapi.AccessKeyID, SecretAccessKey: awsapi.SecretAccessKey}, nil
		})}
	// The test's own client retries (a connection the emulator closed);
	// zerodrop's does not (--provider aws makes one call a request).
	elb := elbv2.NewFromConfig(awsCfg, func(o *elbv2.Options) { o.BaseEndpoint, o.RetryMaxAttempts = aws.String(served.URL), 3 })

	// The gate-only Service, and its NLB as the CCM makes it.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{
		model.AnnotationGateOnly: "true", "service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	dns := seedCCMNLB(t, elb, svc, nodes["n1"].id, nodes["n2"].id)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: dns}}
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	_, from := emu.Calls(0) // from here on every call is zerodrop's or the test's reads

	// zerodrop controller --provider aws --aws-endpoint URL --aws-cluster-id
	// zd-test --aws-propagation 3s, its polls shortened.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drainAddr := ln.Addr().String()
	ln.Close()
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Provider = rc, "aws"
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", drainAddr
	cfg.LeaderElect = false
	cfg.AWS.Endpoint, cfg.AWS.ClusterID, cfg.AWS.Config = served.URL, cluster, &awsCfg
	cfg.AWS.Propagation, cfg.AWS.HealthMaxAge, cfg.AWS.LookupMaxAge = propagation, 100*time.Millisecond, time.Second
	cfg.AWS.QPS, cfg.AWS.Burst = 50, 10
	log := funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{})
	cfg.Override = controller.Overrides{Logger: &log, GatePollInterval: 50 * time.Millisecond,
		DrainCallPollInterval: 50 * time.Millisecond}
	cfg.Registerer = prometheus.NewRegistry()
	in, err := controller.Build(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Start(runCtx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	// Pods with the readiness gate on n1 (registered) and n9 (not).
	pods := map[string]*corev1.Pod{}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for name, n := range map[string]struct{ node, ip string }{"on-n1": {"n1", "10.244.1.5"}, "on-n9": {"n9", "10.244.9.5"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"},
			Finalizers: []string{"zerodrop.dev/test"}},
			Spec: corev1.PodSpec{NodeName: ns + "-" + n.node, Containers: []corev1.Container{{Name: "app", Image: "app"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIP, pod.Status.PodIPs = n.ip, []corev1.PodIP{{IP: n.ip}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pods[name] = pod
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{n.ip}, NodeName: ptr.To(ns + "-" + n.node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: pod.UID},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}})
	}
	if err := c.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range pods {
			_ = c.Patch(context.Background(), p, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	gate := func(name string) corev1.ConditionStatus {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
			t.Fatal(err)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == podgate.ConditionType {
				return cond.Status
			}
		}
		return ""
	}
	testutil.Eventually(t, 60*time.Second, "the readiness gate of the pod whose node is registered", func() (bool, string) {
		s := gate("on-n1")
		return s == corev1.ConditionTrue, string(s)
	})
	if s := gate("on-n9"); s == corev1.ConditionTrue {
		t.Error("the readiness gate opened for a pod whose node is not registered in the target group")
	}
	// Ready, and its endpoint with it; the node's health check passes.
	slice.Endpoints[0].Conditions.Ready = ptr.To(true)
	if slice.Endpoints[0].TargetRef.Name != "on-n1" {
		slice.Endpoints[0], slice.Endpoints[1] = slice.Endpoints[1], slice.Endpoints[0]
		slice.Endpoints[0].Conditions.Ready = ptr.To(true)
	}
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	health := func(id string) elbv2types.TargetHealthStateEnum {
		out, err := elb.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN(t, elb, svc))})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range out.TargetHealthDescriptions {
			if aws.ToString(d.Target.Id) == id {
				return d.TargetHealth.State
			}
		}
		return ""
	}
	testutil.Eventually(t, 60*time.Second, "n1's target healthy", func() (bool, string) {
		s := health(nodes["n1"].id)
		return s == elbv2types.TargetHealthStateEnumHealthy, string(s)
	})

	// on-n1, n1's last pod, goes: its termination gate is called.
	if err := c.Delete(ctx, pods["on-n1"], client.GracePeriodSeconds(300)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cache to see on-n1 terminating", func() (bool, string) {
		var p corev1.Pod
		err := in.Manager.GetCache().Get(ctx, client.ObjectKeyFromObject(pods["on-n1"]), &p)
		return err == nil && p.DeletionTimestamp != nil, fmt.Sprint(err)
	})
	type answer struct {
		result, body string
		at           time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + drainAddr + drain.Path + "?pod=" + ns + "/on-n1")
		if err != nil {
			answered <- answer{body: err.Error(), at: time.Now()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{result: resp.Header.Get(drain.ResultHeader), body: string(body), at: time.Now()}
	}()
	slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	// While n1's target is healthy (its health check passing: kube-proxy
	// still counted the pod), the gate holds, through several reads.
	reads := func() int {
		calls, _ := emu.Calls(from)
		n := 0
		for _, call := range calls {
			if call.Operation == "DescribeTargetHealth" {
				n++
			}
		}
		return n
	}
	r0 := reads()
	testutil.Eventually(t, 30*time.Second, "target health read again after the deletion", func() (bool, string) {
		return reads() >= r0+10, fmt.Sprintf("%d reads", reads()-r0)
	})
	select {
	case a := <-answered:
		t.Fatalf("the termination gate answered %q while n1's target was healthy: %s", a.result, strings.TrimSpace(a.body))
	default:
	}
	// kube-proxy on n1 answers 503 now: the target turns unhealthy.
	setUp(nodes["n1"].ip, false)
	// notYet is when the last read of this test that had n1 not yet
	// unhealthy began: the state changed after it, so any answer of
	// zerodrop's that has it unhealthy came later.
	var notYet, begun time.Time
	testutil.Eventually(t, 60*time.Second, "n1's target unhealthy", func() (bool, string) {
		notYet, begun = begun, time.Now()
		s := health(nodes["n1"].id)
		return s == elbv2types.TargetHealthStateEnumUnhealthy, string(s)
	})
	if notYet.IsZero() {
		t.Fatal("n1's target was unhealthy at the first read: nothing bounds when it turned")
	}
	select {
	case a := <-answered:
		if a.result != "drained" {
			t.Fatalf("the termination gate answered %q: %s", a.result, strings.TrimSpace(a.body))
		}
		if a.at.Before(notYet.Add(propagation)) {
			t.Errorf("the termination gate answered %s after n1's target was last seen not unhealthy, want at least --aws-propagation (%s)",
				a.at.Sub(notYet), propagation)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the termination gate did not answer after n1's target turned unhealthy")
	}

	// No write to AWS, nothing written on the Service.
	calls, _ := emu.Calls(from)
	for _, call := range calls {
		if call.Write() || !strings.HasPrefix(call.Operation, "Describe") {
			t.Errorf("a call that is not a read after the CCM's NLB was made: %s", call)
		}
	}
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) > 0 || len(got.Status.Conditions) > 0 || len(got.Status.LoadBalancer.Ingress) != 1 ||
		got.Status.LoadBalancer.Ingress[0].Hostname != dns {
		t.Errorf("zerodrop wrote the gate-only Service: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
}

// seedCCMNLB makes svc's NLB through the SDK as cloud-provider-aws
// v1.37.1 does for an NLB of instance targets (aws_loadbalancer.go
// ensureLoadBalancerv2, createListenerV2, ensureTargetGroup): named
// a<UID>, tagged with the Service and the cluster, one target group per
// port on the node port with the Local health check (HTTP /healthz on the
// health-check node port, every 10 s, thresholds 2), instances registered
// on the node port, a TCP listener forwarding to it. It returns the DNS
// name, which the CCM writes into the Service's status.
func seedCCMNLB(t *testing.T, elb *elbv2.Client, svc *corev1.Service, instances ...string) string {
	t.Helper()
	ctx := context.Background()
	tags := []elbv2types.Tag{{Key: aws.String(zdaws.TagServiceName), Value: aws.String(svc.Namespace + "/" + svc.Name)},
		{Key: aws.String(zdaws.TagClusterPrefix + cluster), Value: aws.String("owned")}}
	lb, err := elb.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{Name: aws.String(zdaws.LoadBalancerName(string(svc.UID))),
		Type: elbv2types.LoadBalancerTypeEnumNetwork, SubnetMappings: []elbv2types.SubnetMapping{{SubnetId: aws.String("subnet-0a")}}, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	port := svc.Spec.Ports[0]
	tg, err := elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{Name: aws.String("k8s-" + svc.Namespace[:8] + "-" + svc.Name + "-0123456789"),
		VpcId: aws.String(vpc), Port: aws.Int32(port.NodePort), Protocol: elbv2types.ProtocolEnumTcp, TargetType: elbv2types.TargetTypeEnumInstance,
		HealthCheckProtocol: elbv2types.ProtocolEnumHttp, HealthCheckPort: aws.String(fmt.Sprint(svc.Spec.HealthCheckNodePort)),
		HealthCheckPath: aws.String("/healthz"), HealthCheckIntervalSeconds: aws.Int32(10), HealthyThresholdCount: aws.Int32(2),
		UnhealthyThresholdCount: aws.Int32(2), Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	var targets []elbv2types.TargetDescription
	for _, id := range instances {
		targets = append(targets, elbv2types.TargetDescription{Id: aws.String(id), Port: aws.Int32(port.NodePort)})
	}
	if _, err := elb.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: tg.TargetGroups[0].TargetGroupArn, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	if _, err := elb.CreateListener(ctx, &elbv2.CreateListenerInput{LoadBalancerArn: lb.LoadBalancers[0].LoadBalancerArn,
		Port: aws.Int32(port.Port), Protocol: elbv2types.ProtocolEnumTcp, Tags: tags,
		DefaultActions: []elbv2types.Action{{Type: elbv2types.ActionTypeEnumForward, TargetGroupArn: tg.TargetGroups[0].TargetGroupArn}}}); err != nil {
		t.Fatal(err)
	}
	return aws.ToString(lb.LoadBalancers[0].DNSName)
}

// tgARN is the ARN of the target group of svc's NLB.
func tgARN(t *testing.T, elb *elbv2.Client, svc *corev1.Service) string {
	t.Helper()
	out, err := elb.DescribeTargetGroups(context.Background(), &elbv2.DescribeTargetGroupsInput{Names: []string{"k8s-" + svc.Namespace[:8] + "-" + svc.Name + "-0123456789"}})
	if err != nil || len(out.TargetGroups) != 1 {
		t.Fatalf("target group: %v, %v", out, err)
	}
	return aws.ToString(out.TargetGroups[0].TargetGroupArn)
}
