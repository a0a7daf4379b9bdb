package awsdp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/testutil/netlabtest"
)

// The tests' world: a netlab fabric with a load-balancer host, a client
// host and three target hosts ("nodes") serving HTTP on a node port and a
// health endpoint whose answer the test switches; an awsapi emulator on
// loopback, driven through the real aws-sdk-go-v2 ELBv2 client as the CCM
// drives it, whose instances are the target hosts.

const (
	nodePort   = 30080
	healthPort = 32000
	lbPort     = 80
	// propagation is the emulator's: the data plane acts on the target
	// states this long after the emulator's clock reaches them.
	propagation = 3 * time.Second
	drainDelay  = 2 // the target group's deregistration delay, seconds
)

var frontendPool = netip.MustParsePrefix("198.18.200.0/24")

type world struct {
	lab     *netlab.Lab
	lb, cli *netlab.Host
	targets []*server
	emu     *awsapi.Emulator
	probes  *Probes
	elb     *elbv2.Client
	lbARN   *string
	dnsName string
	tgARN   *string
}

// server is one target host.
type server struct {
	id      string // its instance ID
	host    *netlab.Host
	healthy atomic.Bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	l := netlabtest.NewLab(t)
	w := &world{lab: l, probes: NewProbes(nil)}
	host := func(name string) *netlab.Host { return netlabtest.AddHost(t, l, name) }
	w.lb, w.cli = host("lb"), host("cli")
	w.emu = awsapi.New(awsapi.Options{Probe: w.probes.Check, RegistrationDelay: -1, Propagation: propagation})
	w.emu.AddSubnet(awsapi.Subnet{ID: "subnet-a", VPCID: "vpc-1", AZ: "us-east-1a", CIDR: "198.18.0.0/16"})
	for i := 1; i <= 3; i++ {
		s := &server{id: fmt.Sprintf("i-%d", i), host: host(fmt.Sprintf("n%d", i))}
		s.healthy.Store(true)
		w.serve(t, s)
		w.targets = append(w.targets, s)
		w.emu.AddInstance(awsapi.Instance{ID: s.id, PrivateIP: s.host.IP.String(), SubnetID: "subnet-a", VPCID: "vpc-1", AZ: "us-east-1a"})
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
	w.elb = elbv2.NewFromConfig(aws.Config{Region: awsapi.DefaultRegion, HTTPClient: hc, RetryMaxAttempts: 1,
		Credentials: aws.NewCredentialsCache(staticCreds{})}, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(served.URL) })
	return w
}

type staticCreds struct{}

func (staticCreds) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: awsapi.AccessKeyID, SecretAccessKey: awsapi.SecretAccessKey, Source: "test"}, nil
}

// serve makes a target host a node: HTTP on the node port naming the
// instance, /healthz on the health check port answering 503 when the test
// says, and the client's answers routed back through the load balancer (a
// DNATed connection's answers must pass it to be translated back).
func (w *world) serve(t *testing.T, s *server) {
	t.Helper()
	if err := s.host.Run(context.Background(), "ip", "route", "add", w.cli.IP.String()+"/32", "via", w.lb.IP.String()); err != nil {
		t.Fatal(err)
	}
	netlabtest.ServeNamed(t, s.host, s.id, &s.healthy, nodePort, healthPort)
}

// createNLB makes what cloud-provider-aws makes for a Local Service
// (an NLB, a target group of instance targets on the node port with an
// HTTP check of /healthz on the health check node port, every node
// registered, a TCP listener), with the check every second and a short
// deregistration delay.
func (w *world) createNLB(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	lbOut, err := w.elb.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{Name: aws.String("a0123"), Type: elbv2types.LoadBalancerTypeEnumNetwork,
		SubnetMappings: []elbv2types.SubnetMapping{{SubnetId: aws.String("subnet-a")}}})
	if err != nil {
		t.Fatal(err)
	}
	w.lbARN, w.dnsName = lbOut.LoadBalancers[0].LoadBalancerArn, aws.ToString(lbOut.LoadBalancers[0].DNSName)
	tgOut, err := w.elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{Name: aws.String("k8s-web"), Port: aws.Int32(nodePort),
		Protocol: elbv2types.ProtocolEnumTcp, VpcId: aws.String("vpc-1"), TargetType: elbv2types.TargetTypeEnumInstance,
		HealthCheckProtocol: elbv2types.ProtocolEnumHttp, HealthCheckPort: aws.String(fmt.Sprint(healthPort)), HealthCheckPath: aws.String("/healthz"),
		HealthCheckIntervalSeconds: aws.Int32(1), HealthCheckTimeoutSeconds: aws.Int32(1), HealthyThresholdCount: aws.Int32(2), UnhealthyThresholdCount: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	w.tgARN = tgOut.TargetGroups[0].TargetGroupArn
	if _, err := w.elb.ModifyTargetGroupAttributes(ctx, &elbv2.ModifyTargetGroupAttributesInput{TargetGroupArn: w.tgARN,
		Attributes: []elbv2types.TargetGroupAttribute{{Key: aws.String("deregistration_delay.timeout_seconds"), Value: aws.String(fmt.Sprint(drainDelay))}}}); err != nil {
		t.Fatal(err)
	}
	var targets []elbv2types.TargetDescription
	for _, s := range w.targets {
		targets = append(targets, elbv2types.TargetDescription{Id: aws.String(s.id), Port: aws.Int32(nodePort)})
	}
	if _, err := w.elb.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: w.tgARN, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.elb.CreateListener(ctx, &elbv2.CreateListenerInput{LoadBalancerArn: w.lbARN, Port: aws.Int32(lbPort), Protocol: elbv2types.ProtocolEnumTcp,
		DefaultActions: []elbv2types.Action{{Type: elbv2types.ActionTypeEnumForward, TargetGroupArn: w.tgARN}}}); err != nil {
		t.Fatal(err)
	}
}

func (w *world) deregister(t *testing.T, s *server) {
	t.Helper()
	if _, err := w.elb.DeregisterTargets(context.Background(), &elbv2.DeregisterTargetsInput{TargetGroupArn: w.tgARN,
		Targets: []elbv2types.TargetDescription{{Id: aws.String(s.id), Port: aws.Int32(nodePort)}}}); err != nil {
		t.Fatal(err)
	}
}

func (w *world) start(t *testing.T, idle time.Duration) *DataPlane {
	t.Helper()
	dp, err := New(context.Background(), Config{NS: w.lb.Netns, Emulator: w.emu, Probes: w.probes, Frontends: frontendPool, IdleTimeout: idle, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("data plane close: %v", err)
		}
	})
	return dp
}

// frontend is the NLB's address, once the data plane has seen it.
func (w *world) frontend(t *testing.T, dp *DataPlane) netip.Addr {
	t.Helper()
	var a netip.Addr
	waitFor(t, "a frontend for "+w.dnsName, func() error {
		var ok bool
		if a, ok = dp.Frontend(w.dnsName); !ok {
			return errors.New("none yet")
		}
		return nil
	})
	return a
}

// waitTargets waits until the listener's targets, each as "id:state" with
// "+" when receiving and "!" when reset, are want.
func waitTargets(t *testing.T, dp *DataPlane, fe netip.Addr, want ...string) {
	t.Helper()
	waitFor(t, "targets "+strings.Join(want, " "), func() error {
		ts, err := dp.Targets(fe, lbPort)
		if err != nil {
			return err
		}
		var got []string
		for _, x := range ts {
			s := x.ID + ":" + string(x.State)
			if x.Receiving {
				s += "+"
			}
			if x.Reset {
				s += "!"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("targets %v", got)
		}
		return nil
	})
}

type conn = netlabtest.Conn

func feAddr(fe netip.Addr) string { return netip.AddrPortFrom(fe, lbPort).String() }

func dial(cli *netlab.Host, fe netip.Addr, timeout time.Duration) (*conn, error) {
	return netlabtest.Dial(cli, feAddr(fe), timeout)
}

// spread opens n fresh connections and counts the targets that answer
// each; a connection that cannot be opened or answered counts as "".
func spread(t *testing.T, cli *netlab.Host, fe netip.Addr, n int) map[string]int {
	t.Helper()
	return netlabtest.Spread(t, cli, feAddr(fe), n, 3*time.Second)
}

// connTo opens connections until one lands on the named target, and
// returns it open.
func connTo(t *testing.T, cli *netlab.Host, fe netip.Addr, id string) *conn {
	t.Helper()
	return netlabtest.ConnTo(t, cli, feAddr(fe), id)
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	netlabtest.WaitFor(t, what, 60*time.Second, cond)
}
