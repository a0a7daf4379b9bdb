package aws

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/aws/smithy-go"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Finding a Service's NLB as cloud-provider-aws v1.37.1 made it, never by
// a guess: its name is cloudprovider.DefaultLoadBalancerName ("a" and the
// Service's UID without dashes, cut to 32 characters; aws.go:2851), it
// carries the tags kubernetes.io/service-name=<namespace>/<name> and
// kubernetes.io/cluster/<cluster ID> (aws_loadbalancer.go:160, tags.go:324),
// and its DNS name is the hostname the CCM wrote into the Service's status.
// All three must agree, else nothing is read: a gate never opens on
// another Service's load balancer. Each Service port is a TCP (or UDP,
// TCP_UDP, TLS) listener whose default action forwards to one target group
// of instance targets on the node port (createListenerV2, :707).

// lookup is what was found of one Service's NLB.
type lookup struct {
	at        time.Time
	name, dns string
	listeners []nlbListener
	groups    map[string]group // by ARN
}

type nlbListener struct {
	name        string // "<protocol>-<port>", for messages and Target.Listener
	port        int32
	protocol    elbv2types.ProtocolEnum
	targetGroup string
}

type group struct {
	name  string
	probe model.Probe
}

// LoadBalancerName is the name cloud-provider-aws gives a Service's load
// balancer (k8s.io/cloud-provider DefaultLoadBalancerName).
func LoadBalancerName(uid string) string {
	n := "a" + strings.ReplaceAll(uid, "-", "")
	if len(n) > 32 {
		n = n[:32]
	}
	return n
}

// listener is the listener of a Service port: same port, and a protocol
// that carries the Service's (TCP: TCP, TLS or TCP_UDP; UDP: UDP or
// TCP_UDP).
func (lk *lookup) listener(port int32, proto model.Protocol) *nlbListener {
	for i := range lk.listeners {
		l := &lk.listeners[i]
		if l.port == port && carries(l.protocol, proto) {
			return l
		}
	}
	return nil
}

func carries(p elbv2types.ProtocolEnum, proto model.Protocol) bool {
	switch proto {
	case model.TCP:
		return p == elbv2types.ProtocolEnumTcp || p == elbv2types.ProtocolEnumTls || p == elbv2types.ProtocolEnumTcpUdp
	case model.UDP:
		return p == elbv2types.ProtocolEnumUdp || p == elbv2types.ProtocolEnumTcpUdp
	}
	return false
}

// matches reports whether an NLB's tags and DNS name are the CCM's for svc
// in the cluster (clusterID "": any cluster tag).
func matches(svc provider.ForeignService, clusterID, dns string, tags map[string]string) error {
	if !strings.EqualFold(strings.TrimSuffix(dns, "."), strings.TrimSuffix(svc.Hostname, ".")) {
		return fmt.Errorf("its DNS name %s is not the Service's hostname %s", dns, svc.Hostname)
	}
	if want := svc.Namespace + "/" + svc.Name; tags[TagServiceName] != want {
		return fmt.Errorf("tag %s is %q, not %q", TagServiceName, tags[TagServiceName], want)
	}
	if clusterID != "" {
		if _, ok := tags[TagClusterPrefix+clusterID]; !ok {
			return fmt.Errorf("no tag %s%s", TagClusterPrefix, clusterID)
		}
		return nil
	}
	for k := range tags {
		if strings.HasPrefix(k, TagClusterPrefix) {
			return nil
		}
	}
	return fmt.Errorf("no tag %s<cluster>", TagClusterPrefix)
}

// lookup returns what is known of svc's NLB, looked up again when older
// than LookupMaxAge; nil when the Service has no such NLB (yet).
func (p *Provider) lookup(ctx context.Context, svc provider.ForeignService) (*lookup, error) {
	p.mu.Lock()
	lk := p.lookups[svc.UID]
	p.mu.Unlock()
	if lk != nil && time.Since(lk.at) < p.opts.LookupMaxAge && strings.EqualFold(lk.dns, svc.Hostname) {
		return lk, nil
	}
	v, err, _ := p.flights.Do("lookup/"+svc.UID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*p.opts.ReadTimeout)
		defer cancel()
		return p.find(ctx, svc)
	})
	if err != nil {
		return nil, err
	}
	lk, _ = v.(*lookup)
	p.mu.Lock()
	if lk == nil {
		delete(p.lookups, svc.UID)
	} else {
		p.lookups[svc.UID] = lk
	}
	p.prune()
	p.mu.Unlock()
	return lk, nil
}

// find reads svc's NLB, its listeners and target groups: four calls.
func (p *Provider) find(ctx context.Context, svc provider.ForeignService) (*lookup, error) {
	name := LoadBalancerName(svc.UID)
	if err := p.wait(ctx, "DescribeLoadBalancers"); err != nil {
		return nil, err
	}
	lbs, err := p.opts.API.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Names: []string{name}})
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && ae.ErrorCode() == "LoadBalancerNotFound":
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("describe load balancer %s of Service %s/%s: %w", name, svc.Namespace, svc.Name, err)
	case len(lbs.LoadBalancers) != 1:
		return nil, nil
	}
	lb := lbs.LoadBalancers[0]
	arn := aws.ToString(lb.LoadBalancerArn)
	if err := p.wait(ctx, "DescribeTags"); err != nil {
		return nil, err
	}
	tagsOut, err := p.opts.API.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: []string{arn}})
	if err != nil {
		return nil, fmt.Errorf("describe tags of load balancer %s: %w", name, err)
	}
	tags := map[string]string{}
	for _, d := range tagsOut.TagDescriptions {
		for _, t := range d.Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
	}
	if err := matches(svc, p.opts.ClusterID, aws.ToString(lb.DNSName), tags); err != nil {
		p.opts.Log.Info("a load balancer has the name of a gate-only Service's but is not its NLB; not read",
			"service", svc.Namespace+"/"+svc.Name, "loadBalancer", name, "reason", err.Error())
		return nil, nil
	}
	out := &lookup{at: time.Now(), name: name, dns: aws.ToString(lb.DNSName), groups: map[string]group{}}
	if err := p.wait(ctx, "DescribeListeners"); err != nil {
		return nil, err
	}
	ls, err := p.opts.API.DescribeListeners(ctx, &elbv2.DescribeListenersInput{LoadBalancerArn: &arn})
	if err != nil {
		return nil, fmt.Errorf("describe listeners of load balancer %s: %w", name, err)
	}
	for _, l := range ls.Listeners {
		for _, a := range l.DefaultActions {
			if a.Type == elbv2types.ActionTypeEnumForward && a.TargetGroupArn != nil {
				port := aws.ToInt32(l.Port)
				out.listeners = append(out.listeners, nlbListener{name: fmt.Sprintf("%s-%d", l.Protocol, port), port: port,
					protocol: l.Protocol, targetGroup: aws.ToString(a.TargetGroupArn)})
				break
			}
		}
	}
	if err := p.wait(ctx, "DescribeTargetGroups"); err != nil {
		return nil, err
	}
	tgs, err := p.opts.API.DescribeTargetGroups(ctx, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: &arn})
	if err != nil {
		return nil, fmt.Errorf("describe target groups of load balancer %s: %w", name, err)
	}
	for _, tg := range tgs.TargetGroups {
		if tg.TargetType != elbv2types.TargetTypeEnumInstance {
			continue // IP targets are not the CCM's: their IDs are no nodes
		}
		out.groups[aws.ToString(tg.TargetGroupArn)] = group{name: aws.ToString(tg.TargetGroupName), probe: probeOf(tg)}
	}
	kept := out.listeners[:0]
	for _, l := range out.listeners {
		if _, ok := out.groups[l.targetGroup]; ok {
			kept = append(kept, l)
		}
	}
	out.listeners = kept
	return out, nil
}

// probeOf is a target group's health check as model.Probe.
func probeOf(tg elbv2types.TargetGroup) model.Probe {
	pr := model.Probe{Kind: model.ProbeTCP, IntervalMillis: aws.ToInt32(tg.HealthCheckIntervalSeconds) * 1000,
		Rise: aws.ToInt32(tg.HealthyThresholdCount), Fall: aws.ToInt32(tg.UnhealthyThresholdCount)}
	if tg.HealthCheckProtocol == elbv2types.ProtocolEnumHttp || tg.HealthCheckProtocol == elbv2types.ProtocolEnumHttps {
		pr.Kind, pr.Path = model.ProbeHTTP, aws.ToString(tg.HealthCheckPath)
	}
	var port int32
	if _, err := fmt.Sscan(aws.ToString(tg.HealthCheckPort), &port); err == nil {
		pr.Port = port
	}
	return pr
}
