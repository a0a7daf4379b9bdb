package awsapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ELBv2 state and the load balancer, listener and attribute operations
// (target groups and targets: targets.go). Behaviour and error codes
// follow the Elastic Load Balancing API reference (version 2015-12-01).

type loadBalancer struct {
	arn, name, dnsName, scheme, vpc string
	zones                           []zone // one per subnet mapping
	securityGroups                  []string
	created                         time.Time
	attrs                           map[string]string
}

type zone struct{ name, subnet string }

type listener struct {
	arn, lbARN, protocol, tgARN, sslPolicy string
	port                                   int32
	certificates                           []string
}

// nlbAttributes are a new NLB's attributes (API reference,
// LoadBalancerAttribute), the keys DescribeLoadBalancerAttributes lists.
var nlbAttributes = map[string]string{
	"deletion_protection.enabled":            "false",
	"load_balancing.cross_zone.enabled":      "false",
	"access_logs.s3.enabled":                 "false",
	"access_logs.s3.bucket":                  "",
	"access_logs.s3.prefix":                  "",
	"ipv6.deny_all_igw_traffic":              "false",
	"dns_record.client_routing_policy":       "any_availability_zone",
	"zonal_shift.config.enabled":             "false",
	"secondary_ips.auto_assigned.per_subnet": "0",
	"health_check_logs.s3.enabled":           "false",
	"health_check_logs.s3.bucket":            "",
	"health_check_logs.s3.prefix":            "",
}

var elbHandlers = map[string]handler{
	"CreateLoadBalancer":             (*Emulator).createLoadBalancer,
	"DescribeLoadBalancers":          (*Emulator).describeLoadBalancers,
	"DeleteLoadBalancer":             (*Emulator).deleteLoadBalancer,
	"SetSecurityGroups":              (*Emulator).setSecurityGroups,
	"DescribeLoadBalancerAttributes": (*Emulator).describeLoadBalancerAttributes,
	"ModifyLoadBalancerAttributes":   (*Emulator).modifyLoadBalancerAttributes,
	"CreateTargetGroup":              (*Emulator).createTargetGroup,
	"DescribeTargetGroups":           (*Emulator).describeTargetGroups,
	"ModifyTargetGroup":              (*Emulator).modifyTargetGroup,
	"DeleteTargetGroup":              (*Emulator).deleteTargetGroup,
	"DescribeTargetGroupAttributes":  (*Emulator).describeTargetGroupAttributes,
	"ModifyTargetGroupAttributes":    (*Emulator).modifyTargetGroupAttributes,
	"RegisterTargets":                (*Emulator).registerTargets,
	"DeregisterTargets":              (*Emulator).deregisterTargets,
	"DescribeTargetHealth":           (*Emulator).describeTargetHealth,
	"CreateListener":                 (*Emulator).createListener,
	"DescribeListeners":              (*Emulator).describeListeners,
	"ModifyListener":                 (*Emulator).modifyListener,
	"DeleteListener":                 (*Emulator).deleteListener,
	"AddTags":                        (*Emulator).addTags,
	"RemoveTags":                     (*Emulator).removeTags,
	"DescribeTags":                   (*Emulator).describeTags,
}

// The output documents, member names as the awsquery responses have them.

type xmlTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type xmlAZ struct {
	ZoneName string `xml:"ZoneName"`
	SubnetID string `xml:"SubnetId"`
}

type xmlLoadBalancer struct {
	LoadBalancerArn       string   `xml:"LoadBalancerArn"`
	DNSName               string   `xml:"DNSName"`
	CanonicalHostedZoneID string   `xml:"CanonicalHostedZoneId"`
	CreatedTime           string   `xml:"CreatedTime"`
	LoadBalancerName      string   `xml:"LoadBalancerName"`
	Scheme                string   `xml:"Scheme"`
	VpcID                 string   `xml:"VpcId"`
	State                 string   `xml:"State>Code"`
	Type                  string   `xml:"Type"`
	AvailabilityZones     []xmlAZ  `xml:"AvailabilityZones>member"`
	SecurityGroups        []string `xml:"SecurityGroups>member"`
	IPAddressType         string   `xml:"IpAddressType"`
}

type xmlAttribute struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type xmlAction struct {
	Type           string `xml:"Type"`
	TargetGroupArn string `xml:"TargetGroupArn"`
}

type xmlCertificate struct {
	CertificateArn string `xml:"CertificateArn"`
}

type xmlListener struct {
	ListenerArn     string           `xml:"ListenerArn"`
	LoadBalancerArn string           `xml:"LoadBalancerArn"`
	Port            int32            `xml:"Port"`
	Protocol        string           `xml:"Protocol"`
	Certificates    []xmlCertificate `xml:"Certificates>member,omitempty"`
	SslPolicy       string           `xml:"SslPolicy,omitempty"`
	DefaultActions  []xmlAction      `xml:"DefaultActions>member"`
}

// isoTime is CreatedTime's format (ISO 8601, milliseconds).
const isoTime = "2006-01-02T15:04:05.000Z"

func (e *Emulator) lbDoc(lb *loadBalancer) xmlLoadBalancer {
	d := xmlLoadBalancer{
		LoadBalancerArn: lb.arn, DNSName: lb.dnsName, CanonicalHostedZoneID: nlbHostedZone,
		CreatedTime: lb.created.UTC().Format(isoTime), LoadBalancerName: lb.name, Scheme: lb.scheme, VpcID: lb.vpc,
		State: "active", Type: "network", SecurityGroups: lb.securityGroups, IPAddressType: "ipv4",
	}
	for _, z := range lb.zones {
		d.AvailabilityZones = append(d.AvailabilityZones, xmlAZ{ZoneName: z.name, SubnetID: z.subnet})
	}
	return d
}

// nlbHostedZone is us-east-1's NLB hosted zone ID (Elastic Load Balancing
// endpoints and quotas); only Route 53 aliases use it.
const nlbHostedZone = "Z26RNL4JYFTOTI"

func elbTags(p params) map[string]string {
	out := map[string]string{}
	for _, t := range p.items("Tags") {
		out[t.get("Key")] = t.get("Value")
	}
	return out
}

func (e *Emulator) createLoadBalancer(p params) (any, error) {
	name := p.get("Name")
	if name == "" || len(name) > 32 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "Load balancer name '%s' must be 1 to 32 characters", name)
	}
	if typ := p.get("Type"); typ != "network" {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "the emulator serves network load balancers only, not %q", typ)
	}
	for _, lb := range e.lbs {
		if lb.name == name { // idempotent, as CreateLoadBalancer is for the same settings
			return struct {
				LoadBalancers []xmlLoadBalancer `xml:"LoadBalancers>member"`
			}{[]xmlLoadBalancer{e.lbDoc(lb)}}, nil
		}
	}
	subnets := p.strings("Subnets")
	for _, m := range p.items("SubnetMappings") {
		subnets = append(subnets, m.get("SubnetId"))
	}
	if len(subnets) == 0 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "At least one subnet must be specified")
	}
	lb := &loadBalancer{name: name, scheme: "internet-facing", created: e.opts.Now(), attrs: clone(nlbAttributes),
		securityGroups: p.strings("SecurityGroups")}
	if s := p.get("Scheme"); s != "" {
		lb.scheme = s
	}
	for _, id := range subnets {
		s, ok := e.subnets[id]
		if !ok {
			return nil, errorf(http.StatusBadRequest, "SubnetNotFound", "The subnet ID '%s' is not valid", id)
		}
		lb.vpc = s.VPCID
		lb.zones = append(lb.zones, zone{name: s.AZ, subnet: id})
	}
	for _, sg := range lb.securityGroups {
		if _, ok := e.sgs[sg]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidSecurityGroup", "The security group '%s' does not exist", sg)
		}
	}
	e.seq++
	suffix := fmt.Sprintf("%016x", e.seq)
	lb.arn = fmt.Sprintf("arn:aws:elasticloadbalancing:%s:%s:loadbalancer/net/%s/%s", e.opts.Region, AccountID, name, suffix)
	lb.dnsName = fmt.Sprintf("%s-%s.elb.%s.amazonaws.com", name, suffix[6:], e.opts.Region)
	e.lbs[lb.arn] = lb
	e.setTags(lb.arn, elbTags(p))
	return struct {
		LoadBalancers []xmlLoadBalancer `xml:"LoadBalancers>member"`
	}{[]xmlLoadBalancer{e.lbDoc(lb)}}, nil
}

func (e *Emulator) describeLoadBalancers(p params) (any, error) {
	names, arns := p.strings("Names"), p.strings("LoadBalancerArns")
	var out []xmlLoadBalancer
	var missing []string
	switch {
	case len(names) > 0:
		for _, n := range names {
			lb := e.lbByName(n)
			if lb == nil {
				missing = append(missing, n)
				continue
			}
			out = append(out, e.lbDoc(lb))
		}
	case len(arns) > 0:
		for _, a := range arns {
			lb, ok := e.lbs[a]
			if !ok {
				missing = append(missing, a)
				continue
			}
			out = append(out, e.lbDoc(lb))
		}
	default:
		for _, a := range sortedKeys(e.lbs) {
			out = append(out, e.lbDoc(e.lbs[a]))
		}
	}
	if len(missing) > 0 {
		return nil, errorf(http.StatusBadRequest, "LoadBalancerNotFound", "Load balancers '[%s]' not found", strings.Join(missing, ", "))
	}
	return struct {
		LoadBalancers []xmlLoadBalancer `xml:"LoadBalancers>member"`
	}{out}, nil
}

func (e *Emulator) lbByName(name string) *loadBalancer {
	for _, lb := range e.lbs {
		if lb.name == name {
			return lb
		}
	}
	return nil
}

func (e *Emulator) lbByARN(arn string) (*loadBalancer, error) {
	lb, ok := e.lbs[arn]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "LoadBalancerNotFound", "Load balancer '%s' not found", arn)
	}
	return lb, nil
}

// deleteLoadBalancer deletes it and its listeners; deleting one that does
// not exist succeeds ("If the load balancer does not exist or has already
// been deleted, the call succeeds", API reference).
func (e *Emulator) deleteLoadBalancer(p params) (any, error) {
	arn := p.get("LoadBalancerArn")
	for la, l := range e.listeners {
		if l.lbARN == arn {
			delete(e.listeners, la)
			delete(e.tags, la)
		}
	}
	delete(e.lbs, arn)
	delete(e.tags, arn)
	return nil, nil
}

func (e *Emulator) setSecurityGroups(p params) (any, error) {
	lb, err := e.lbByARN(p.get("LoadBalancerArn"))
	if err != nil {
		return nil, err
	}
	sgs := p.strings("SecurityGroups")
	for _, sg := range sgs {
		if _, ok := e.sgs[sg]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidSecurityGroup", "The security group '%s' does not exist", sg)
		}
	}
	lb.securityGroups = sgs
	return struct {
		SecurityGroupIDs []string `xml:"SecurityGroupIds>member"`
	}{sgs}, nil
}

func attributesDoc(attrs map[string]string) any {
	var out []xmlAttribute
	for _, k := range sortedKeys(attrs) {
		out = append(out, xmlAttribute{k, attrs[k]})
	}
	return struct {
		Attributes []xmlAttribute `xml:"Attributes>member"`
	}{out}
}

// modifyAttributes sets the request's Attributes on attrs; a key the
// resource does not have is refused whole, as ELB refuses it.
func modifyAttributes(attrs map[string]string, p params) error {
	items := p.items("Attributes")
	for _, a := range items {
		if _, ok := attrs[a.get("Key")]; !ok {
			return errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "Key %s not valid", a.get("Key"))
		}
	}
	for _, a := range items {
		attrs[a.get("Key")] = a.get("Value")
	}
	return nil
}

func (e *Emulator) describeLoadBalancerAttributes(p params) (any, error) {
	lb, err := e.lbByARN(p.get("LoadBalancerArn"))
	if err != nil {
		return nil, err
	}
	return attributesDoc(lb.attrs), nil
}

func (e *Emulator) modifyLoadBalancerAttributes(p params) (any, error) {
	lb, err := e.lbByARN(p.get("LoadBalancerArn"))
	if err != nil {
		return nil, err
	}
	if err := modifyAttributes(lb.attrs, p); err != nil {
		return nil, err
	}
	return attributesDoc(lb.attrs), nil
}

func listenerDoc(l *listener) xmlListener {
	d := xmlListener{ListenerArn: l.arn, LoadBalancerArn: l.lbARN, Port: l.port, Protocol: l.protocol, SslPolicy: l.sslPolicy,
		DefaultActions: []xmlAction{{Type: "forward", TargetGroupArn: l.tgARN}}}
	for _, c := range l.certificates {
		d.Certificates = append(d.Certificates, xmlCertificate{c})
	}
	return d
}

// listenerFields reads what CreateListener and ModifyListener share into l.
func (e *Emulator) listenerFields(l *listener, p params) error {
	if port, ok := p.int32("Port"); ok {
		l.port = port
	}
	if pr := p.get("Protocol"); pr != "" {
		l.protocol = pr
	}
	if p.has("SslPolicy") {
		l.sslPolicy = p.get("SslPolicy")
	}
	if certs := p.items("Certificates"); len(certs) > 0 {
		l.certificates = nil
		for _, c := range certs {
			l.certificates = append(l.certificates, c.get("CertificateArn"))
		}
	}
	actions := p.items("DefaultActions")
	if len(actions) == 0 {
		if l.tgARN == "" {
			return errorf(http.StatusBadRequest, "ValidationError", "A default action must be specified")
		}
		return nil
	}
	if len(actions) != 1 || actions[0].get("Type") != "forward" {
		return errorf(http.StatusBadRequest, "ValidationError", "the emulator serves one forward action per listener")
	}
	tgARN := actions[0].get("TargetGroupArn")
	tg, ok := e.tgs[tgARN]
	if !ok {
		return errorf(http.StatusBadRequest, "TargetGroupNotFound", "Target groups '%s' not found", tgARN)
	}
	if lbs := e.tgLoadBalancers(tg.arn); len(lbs) > 0 && !slices.Contains(lbs, l.lbARN) {
		return errorf(http.StatusBadRequest, "TargetGroupAssociationLimit",
			"The following target groups cannot be associated with more than one load balancer: %s", tgARN)
	}
	l.tgARN = tgARN
	return nil
}

func (e *Emulator) createListener(p params) (any, error) {
	lb, err := e.lbByARN(p.get("LoadBalancerArn"))
	if err != nil {
		return nil, err
	}
	l := &listener{lbARN: lb.arn}
	if err := e.listenerFields(l, p); err != nil {
		return nil, err
	}
	for _, o := range e.listeners {
		if o.lbARN == lb.arn && o.port == l.port {
			return nil, errorf(http.StatusBadRequest, "DuplicateListener", "A listener already exists on this port for this load balancer")
		}
	}
	e.seq++
	l.arn = strings.Replace(lb.arn, ":loadbalancer/", ":listener/", 1) + fmt.Sprintf("/%016x", e.seq)
	e.listeners[l.arn] = l
	e.setTags(l.arn, elbTags(p))
	return struct {
		Listeners []xmlListener `xml:"Listeners>member"`
	}{[]xmlListener{listenerDoc(l)}}, nil
}

func (e *Emulator) describeListeners(p params) (any, error) {
	var out []xmlListener
	if arns := p.strings("ListenerArns"); len(arns) > 0 {
		for _, a := range arns {
			l, ok := e.listeners[a]
			if !ok {
				return nil, errorf(http.StatusBadRequest, "ListenerNotFound", "One or more listeners not found")
			}
			out = append(out, listenerDoc(l))
		}
	} else {
		lb, err := e.lbByARN(p.get("LoadBalancerArn"))
		if err != nil {
			return nil, err
		}
		for _, a := range sortedKeys(e.listeners) {
			if l := e.listeners[a]; l.lbARN == lb.arn {
				out = append(out, listenerDoc(l))
			}
		}
	}
	return struct {
		Listeners []xmlListener `xml:"Listeners>member"`
	}{out}, nil
}

func (e *Emulator) modifyListener(p params) (any, error) {
	l, ok := e.listeners[p.get("ListenerArn")]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "ListenerNotFound", "One or more listeners not found")
	}
	next := *l
	if err := e.listenerFields(&next, p); err != nil {
		return nil, err
	}
	*l = next
	return struct {
		Listeners []xmlListener `xml:"Listeners>member"`
	}{[]xmlListener{listenerDoc(l)}}, nil
}

func (e *Emulator) deleteListener(p params) (any, error) {
	arn := p.get("ListenerArn")
	if _, ok := e.listeners[arn]; !ok {
		return nil, errorf(http.StatusBadRequest, "ListenerNotFound", "One or more listeners not found")
	}
	delete(e.listeners, arn)
	delete(e.tags, arn)
	return nil, nil
}
