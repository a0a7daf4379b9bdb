package aws

import (
	"testing"

	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

func TestLoadBalancerName(t *testing.T) {
	cases := map[string]string{
		"1b4e28ba-2fa1-11d2-883f-0016d3cca427": "a1b4e28ba2fa111d2883f0016d3cca42", // "a" and 31 of the 32 hex digits
		"abc":                                  "aabc",
	}
	for uid, want := range cases {
		if got := LoadBalancerName(uid); got != want {
			t.Errorf("LoadBalancerName(%s) = %s, want %s", uid, got, want)
		}
	}
}

func TestCarries(t *testing.T) {
	cases := []struct {
		p     elbv2types.ProtocolEnum
		proto model.Protocol
		want  bool
	}{
		{elbv2types.ProtocolEnumTcp, model.TCP, true},
		{elbv2types.ProtocolEnumTls, model.TCP, true},
		{elbv2types.ProtocolEnumTcpUdp, model.TCP, true},
		{elbv2types.ProtocolEnumTcpUdp, model.UDP, true},
		{elbv2types.ProtocolEnumUdp, model.TCP, false},
		{elbv2types.ProtocolEnumTcp, model.UDP, false},
	}
	for _, c := range cases {
		if got := carries(c.p, c.proto); got != c.want {
			t.Errorf("carries(%s, %s) = %v, want %v", c.p, c.proto, got, c.want)
		}
	}
}

// TestMatches: an NLB is read for a Service only when its DNS name is the
// Service's hostname and its tags are the CCM's for that Service and
// cluster.
func TestMatches(t *testing.T) {
	svc := provider.ForeignService{Namespace: "web", Name: "front", UID: "u", Hostname: "a1-123.elb.us-east-1.amazonaws.com"}
	good := map[string]string{TagServiceName: "web/front", TagClusterPrefix + "zd": "owned"}
	cases := []struct {
		name, cluster, dns string
		tags               map[string]string
		ok                 bool
	}{
		{"the CCM's", "zd", svc.Hostname, good, true},
		{"any cluster tag without a cluster ID", "", svc.Hostname, good, true},
		{"DNS name differs only in case and root dot", "zd", "A1-123.elb.us-east-1.amazonaws.com.", good, true},
		{"another hostname", "zd", "a2-1.elb.us-east-1.amazonaws.com", good, false},
		{"another Service's", "zd", svc.Hostname, map[string]string{TagServiceName: "web/back", TagClusterPrefix + "zd": "owned"}, false},
		{"another cluster's", "zd", svc.Hostname, map[string]string{TagServiceName: "web/front", TagClusterPrefix + "other": "owned"}, false},
		{"no cluster tag", "", svc.Hostname, map[string]string{TagServiceName: "web/front"}, false},
	}
	for _, c := range cases {
		if err := matches(svc, c.cluster, c.dns, c.tags); (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok %v", c.name, err, c.ok)
		}
	}
}
