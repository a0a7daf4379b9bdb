package awsapi_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// TestSnapshot reads, through Snapshot, what the API made: the NLB with
// its DNS name and listener, the target group with its health check and
// registrations, each registration's state and health check request, and
// the targets receiving, as the emulator's own Receiving says; a snapshot
// taken is not moved by the emulator's later time.
func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	var aFails atomic.Bool
	w := newWorld(t, func(p awsapi.ProbeRequest, _ time.Time) awsapi.CheckResult {
		if p.Target.ID == "i-c" || (p.Target.ID == "i-a" && aFails.Load()) {
			return awsapi.CheckResult{HTTPCode: 503}
		}
		return awsapi.CheckResult{OK: true, HTTPCode: 200}
	})
	lbOut, err := w.elb.CreateLoadBalancer(ctx, &elbv2.CreateLoadBalancerInput{Name: aws.String("a1"), Type: elbv2types.LoadBalancerTypeEnumNetwork,
		SubnetMappings: []elbv2types.SubnetMapping{{SubnetId: aws.String("subnet-a")}}})
	if err != nil {
		t.Fatal(err)
	}
	lb := lbOut.LoadBalancers[0]
	mkTG := func(name string) *string {
		out, err := w.elb.CreateTargetGroup(ctx, &elbv2.CreateTargetGroupInput{Name: aws.String(name), Port: aws.Int32(30080),
			Protocol: elbv2types.ProtocolEnumTcp, VpcId: aws.String("vpc-1"), HealthCheckProtocol: elbv2types.ProtocolEnumHttp,
			HealthCheckPort: aws.String("32000"), HealthCheckPath: aws.String("/healthz"), HealthCheckIntervalSeconds: aws.Int32(10),
			HealthyThresholdCount: aws.Int32(2), UnhealthyThresholdCount: aws.Int32(2)})
		if err != nil {
			t.Fatal(err)
		}
		return out.TargetGroups[0].TargetGroupArn
	}
	tgARN, idleARN := mkTG("web"), mkTG("idle")
	var targets []elbv2types.TargetDescription
	for _, id := range []string{"i-a", "i-b", "i-c"} {
		targets = append(targets, elbv2types.TargetDescription{Id: aws.String(id)})
	}
	for _, arn := range []*string{tgARN, idleARN} {
		if _, err := w.elb.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: arn, Targets: targets}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.elb.CreateListener(ctx, &elbv2.CreateListenerInput{LoadBalancerArn: lb.LoadBalancerArn, Port: aws.Int32(443),
		Protocol: elbv2types.ProtocolEnumTcp, DefaultActions: []elbv2types.Action{{Type: elbv2types.ActionTypeEnumForward, TargetGroupArn: tgARN}}}); err != nil {
		t.Fatal(err)
	}
	// Two checks each and the propagation time: i-a and i-b healthy, i-c
	// unhealthy, in the data plane's view too.
	w.clock.Add(awsapi.DefaultRegistrationDelay + 20*time.Second + awsapi.DefaultPropagation)
	if _, err := w.elb.DeregisterTargets(ctx, &elbv2.DeregisterTargetsInput{TargetGroupArn: tgARN,
		Targets: []elbv2types.TargetDescription{{Id: aws.String("i-b")}}}); err != nil {
		t.Fatal(err)
	}

	s := w.emu.Snapshot()
	if !s.Time.Equal(w.clock.Now()) || s.Propagation != awsapi.DefaultPropagation {
		t.Errorf("snapshot time %v, propagation %v; want the emulator's clock %v and its default propagation", s.Time, s.Propagation, w.clock.Now())
	}
	if len(s.LoadBalancers) != 1 {
		t.Fatalf("load balancers %+v, want a1", s.LoadBalancers)
	}
	got := s.LoadBalancers[0]
	if got.Name != "a1" || got.DNSName != aws.ToString(lb.DNSName) || got.ARN != aws.ToString(lb.LoadBalancerArn) ||
		len(got.Listeners) != 1 || got.Listeners[0].Port != 443 || got.Listeners[0].Protocol != "TCP" ||
		got.Listeners[0].TargetGroupARN != aws.ToString(tgARN) {
		t.Errorf("load balancer %+v, want a1 with its DNS name and a TCP listener on 443 forwarding to %s", got, aws.ToString(tgARN))
	}
	tg, ok := s.TargetGroup(aws.ToString(tgARN))
	if !ok {
		t.Fatalf("target group %s not in the snapshot", aws.ToString(tgARN))
	}
	hc := tg.HealthCheck
	if !tg.InUse || tg.TargetType != "instance" || tg.Port != 30080 || hc.Protocol != "HTTP" || hc.Path != "/healthz" ||
		hc.PortNumber(30080) != 32000 || hc.Interval != 10*time.Second || hc.HealthyThreshold != 2 || hc.Matcher != "200-399" {
		t.Errorf("target group %+v, want in use, instance targets on 30080, HTTP /healthz on 32000 every 10 s", tg)
	}
	if tg.Attributes["deregistration_delay.timeout_seconds"] != "300" {
		t.Errorf("attributes %v, want the default deregistration delay", tg.Attributes)
	}
	states := map[string]awsapi.State{}
	for _, m := range tg.Members {
		st, _ := m.Life.StatusAt(s.Time)
		states[m.Target.ID] = st.State
		if m.Target.Port != 30080 || m.Probe.Port != 32000 || m.Probe.Path != "/healthz" || m.Probe.IP == "" || m.Probe.TargetGroupARN != tg.ARN {
			t.Errorf("member %+v: want port 30080 and an HTTP check of /healthz on 32000 at the instance's address", m)
		}
	}
	want := map[string]awsapi.State{"i-a": awsapi.StateHealthy, "i-b": awsapi.StateDraining, "i-c": awsapi.StateUnhealthy}
	for id, st := range want {
		if states[id] != st {
			t.Errorf("states %v, want %v", states, want)
			break
		}
	}
	recv, err := w.emu.Receiving(tg.ARN)
	if err != nil {
		t.Fatal(err)
	}
	// i-b was deregistered now: it receives for the propagation time.
	wantRecv := []awsapi.Target{{ID: "i-a", Port: 30080}, {ID: "i-b", Port: 30080}}
	if got := s.Receiving(tg); !slices.Equal(got, recv) || !slices.Equal(got, wantRecv) {
		t.Errorf("snapshot's receiving %v, emulator's %v: want both %v", got, recv, wantRecv)
	}
	if idle, ok := s.TargetGroup(aws.ToString(idleARN)); !ok || idle.InUse || len(s.Receiving(idle)) != 0 {
		t.Errorf("target group without a listener: %+v, %v; want not in use, receiving nothing", idle, ok)
	}

	// The emulator moves on (i-a fails its checks, i-b's drain ends); the
	// snapshot's copies do not.
	aFails.Store(true)
	w.clock.Add(awsapi.DefaultDeregistrationDelay + awsapi.DefaultPropagation + time.Second)
	later := w.emu.Snapshot()
	ltg, _ := later.TargetGroup(tg.ARN)
	if len(ltg.Members) != 2 || ltg.Members[0].Target.ID != "i-a" {
		t.Fatalf("members after the drain ended: %+v, want i-a and i-c", ltg.Members)
	}
	if st, _ := ltg.Members[0].Life.StatusAt(later.Time); st.State != awsapi.StateUnhealthy {
		t.Errorf("i-a in the later snapshot: %+v, want unhealthy", st)
	}
	if st, _ := tg.Members[0].Life.StatusAt(later.Time); st.State != awsapi.StateHealthy {
		t.Errorf("i-a in the first snapshot, read at the later time: %+v, want healthy still (a copy)", st)
	}
}
