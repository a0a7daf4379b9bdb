package awsapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The classic Elastic Load Balancing API (version 2012-06-01): what
// cloud-provider-aws v1.37.1 calls for a Service of type LoadBalancer
// without the aws-load-balancer-type: nlb annotation (aws.go
// EnsureLoadBalancer from :2568, aws_loadbalancer.go ensureLoadBalancer
// :1169-1440, ensureLoadBalancerHealthCheck :1575, ensureLoadBalancerInstances
// :1630, the policy calls :1695-1790; EnsureLoadBalancerDeleted aws.go:3345-3400).
// It is awsquery like ELBv2 and signed with the same name
// (elasticloadbalancing); only the Version (and so the XML namespace)
// tells them apart, which is how the SDKs' two clients reach one
// endpoint. Load balancers are keyed by name, not by ARN. Behaviour and
// error codes follow the Elastic Load Balancing API Reference (version
// 2012-06-01) unless a comment names another source; the policies and
// health check: elb_policies.go.

const (
	// apiClassic is how the call record names the classic API (the AWS
	// CLI's "elb" beside "elbv2"); its requests are signed as apiELB.
	apiClassic       = "elb"
	classicVersion   = "2012-06-01"
	classicNamespace = "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/"
	// classicHostedZone is us-east-1's hosted zone ID of Classic Load
	// Balancers (Elastic Load Balancing endpoints and quotas, AWS General
	// Reference); only Route 53 aliases use it.
	classicHostedZone = "Z35SXDOTRQ7X7K"
	// classicMaxTags: "Each load balancer can have a maximum of 50 tags"
	// (API reference, AddTags; TooManyTags).
	classicMaxTags = 50
)

type classicLB struct {
	name, dnsName, scheme, vpc string
	created                    time.Time
	subnets                    []string
	securityGroups             []string
	listeners                  []classicListener // by load balancer port
	health                     classicHealthCheck
	instances                  []string // registered instance IDs, in order
	attrs                      classicAttributes
	policies                   []classicPolicy
	backends                   map[int32][]string // instance port → policy names
	tags                       map[string]string
}

type classicListener struct {
	protocol, instanceProtocol, certificate string
	port, instancePort                      int32
	policies                                []string
}

// classicAttributes are LoadBalancerAttributes. A load balancer made
// through the API starts with connection draining off and its timeout at
// 300 s, an idle timeout of 60 s, cross-zone off and access logs off
// (User Guide for Classic Load Balancers: "Configure connection
// draining", "Configure the idle connection timeout", "Configure
// cross-zone load balancing": off when created through the API or CLI),
// and desync mitigation mode defensive (API reference,
// AdditionalAttribute). That Describe returns the timeout while draining
// is off, and the desync mode among AdditionalAttributes before anyone
// set it, is moto 5.2.1's model (elb/models.py modify_load_balancer_attributes);
// AWS documents neither. cloud-provider-aws's attribute write does not
// depend on it (TestRealAWSCCMClassic).
type classicAttributes struct {
	accessLog       bool
	emitInterval    *int32
	bucket, prefix  *string
	draining        bool
	drainingTimeout int32
	idleTimeout     int32
	crossZone       bool
	additional      []kv
}

func newClassicAttributes() classicAttributes {
	return classicAttributes{drainingTimeout: 300, idleTimeout: 60,
		additional: []kv{{"elb.http.desyncmitigationmode", "defensive"}}}
}

var classicHandlers = map[string]handler{
	"CreateLoadBalancer":                      (*Emulator).classicCreate,
	"DescribeLoadBalancers":                   (*Emulator).classicDescribe,
	"DeleteLoadBalancer":                      (*Emulator).classicDelete,
	"CreateLoadBalancerListeners":             (*Emulator).classicCreateListeners,
	"DeleteLoadBalancerListeners":             (*Emulator).classicDeleteListeners,
	"AttachLoadBalancerToSubnets":             (*Emulator).classicAttachSubnets,
	"DetachLoadBalancerFromSubnets":           (*Emulator).classicDetachSubnets,
	"ApplySecurityGroupsToLoadBalancer":       (*Emulator).classicApplySecurityGroups,
	"DescribeLoadBalancerAttributes":          (*Emulator).classicDescribeAttributes,
	"ModifyLoadBalancerAttributes":            (*Emulator).classicModifyAttributes,
	"ConfigureHealthCheck":                    (*Emulator).classicConfigureHealthCheck,
	"RegisterInstancesWithLoadBalancer":       (*Emulator).classicRegister,
	"DeregisterInstancesFromLoadBalancer":     (*Emulator).classicDeregister,
	"CreateLoadBalancerPolicy":                (*Emulator).classicCreatePolicy,
	"DescribeLoadBalancerPolicies":            (*Emulator).classicDescribePolicies,
	"SetLoadBalancerPoliciesOfListener":       (*Emulator).classicSetListenerPolicies,
	"SetLoadBalancerPoliciesForBackendServer": (*Emulator).classicSetBackendPolicies,
	"AddTags":      (*Emulator).classicAddTags,
	"RemoveTags":   (*Emulator).classicRemoveTags,
	"DescribeTags": (*Emulator).classicDescribeTags,
}

// The output documents, member names as the API reference's
// LoadBalancerDescription and its parts have them.

type xmlClassicListener struct {
	Protocol         string `xml:"Protocol"`
	LoadBalancerPort int32  `xml:"LoadBalancerPort"`
	InstanceProtocol string `xml:"InstanceProtocol"`
	InstancePort     int32  `xml:"InstancePort"`
	SSLCertificateID string `xml:"SSLCertificateId,omitempty"`
}

type xmlListenerDescription struct {
	Listener    xmlClassicListener `xml:"Listener"`
	PolicyNames []string           `xml:"PolicyNames>member"`
}

type xmlBackend struct {
	InstancePort int32    `xml:"InstancePort"`
	PolicyNames  []string `xml:"PolicyNames>member"`
}

type xmlClassicInstance struct {
	InstanceID string `xml:"InstanceId"`
}

type xmlLoadBalancerDescription struct {
	LoadBalancerName          string                   `xml:"LoadBalancerName"`
	DNSName                   string                   `xml:"DNSName"`
	CanonicalHostedZoneName   string                   `xml:"CanonicalHostedZoneName"`
	CanonicalHostedZoneNameID string                   `xml:"CanonicalHostedZoneNameID"`
	ListenerDescriptions      []xmlListenerDescription `xml:"ListenerDescriptions>member"`
	AppCookiePolicies         []struct{}               `xml:"Policies>AppCookieStickinessPolicies>member"`
	LBCookiePolicies          []struct{}               `xml:"Policies>LBCookieStickinessPolicies>member"`
	OtherPolicies             []string                 `xml:"Policies>OtherPolicies>member"`
	BackendServerDescriptions []xmlBackend             `xml:"BackendServerDescriptions>member"`
	AvailabilityZones         []string                 `xml:"AvailabilityZones>member"`
	Subnets                   []string                 `xml:"Subnets>member"`
	VPCID                     string                   `xml:"VPCId"`
	Instances                 []xmlClassicInstance     `xml:"Instances>member"`
	HealthCheck               xmlHealthCheck           `xml:"HealthCheck"`
	SourceSecurityGroupOwner  string                   `xml:"SourceSecurityGroup>OwnerAlias"`
	SourceSecurityGroupName   string                   `xml:"SourceSecurityGroup>GroupName"`
	SecurityGroups            []string                 `xml:"SecurityGroups>member"`
	CreatedTime               string                   `xml:"CreatedTime"`
	Scheme                    string                   `xml:"Scheme"`
}

func (e *Emulator) classicDoc(lb *classicLB) xmlLoadBalancerDescription {
	d := xmlLoadBalancerDescription{LoadBalancerName: lb.name, DNSName: lb.dnsName, CanonicalHostedZoneNameID: classicHostedZone,
		Subnets: lb.subnets, VPCID: lb.vpc, HealthCheck: lb.health.doc(), SecurityGroups: lb.securityGroups,
		SourceSecurityGroupOwner: AccountID, CreatedTime: lb.created.UTC().Format(isoTime), Scheme: lb.scheme}
	if lb.scheme != "internal" { // an internal load balancer has no public zone name
		d.CanonicalHostedZoneName = lb.dnsName
	}
	for _, l := range lb.listeners {
		d.ListenerDescriptions = append(d.ListenerDescriptions, xmlListenerDescription{
			Listener: xmlClassicListener{Protocol: l.protocol, LoadBalancerPort: l.port, InstanceProtocol: l.instanceProtocol,
				InstancePort: l.instancePort, SSLCertificateID: l.certificate},
			PolicyNames: l.policies})
	}
	for _, p := range lb.policies {
		d.OtherPolicies = append(d.OtherPolicies, p.name)
	}
	for _, port := range sortedPorts(lb.backends) {
		d.BackendServerDescriptions = append(d.BackendServerDescriptions, xmlBackend{InstancePort: port, PolicyNames: lb.backends[port]})
	}
	for _, s := range lb.subnets {
		if sn, ok := e.subnets[s]; ok && !slices.Contains(d.AvailabilityZones, sn.AZ) {
			d.AvailabilityZones = append(d.AvailabilityZones, sn.AZ)
		}
	}
	for _, id := range lb.instances {
		d.Instances = append(d.Instances, xmlClassicInstance{id})
	}
	if len(lb.securityGroups) > 0 {
		if sg, ok := e.sgs[lb.securityGroups[0]]; ok {
			d.SourceSecurityGroupName = sg.Name
		}
	}
	return d
}

func sortedPorts(m map[int32][]string) []int32 {
	var out []int32
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// classicNotFound is what every operation answers for a name it does not
// hold; the message is AWS's as cloud controllers' logs quote it.
func classicNotFound(name string) error {
	return errorf(http.StatusBadRequest, "LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '%s'", name)
}

func (e *Emulator) classicLB(name string) (*classicLB, error) {
	lb, ok := e.classic[name]
	if !ok {
		return nil, classicNotFound(name)
	}
	return lb, nil
}

// classicName: "a maximum of 32 characters, must contain only
// alphanumeric characters or hyphens, and cannot begin or end with a
// hyphen" (API reference, CreateLoadBalancer).
var classicName = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

// readListeners reads Listeners.member.N. Protocols are kept upper case,
// as Describe returns them; an absent InstanceProtocol is the front end's.
func readListeners(p params) ([]classicListener, error) {
	var out []classicListener
	for _, m := range p.items("Listeners") {
		l := classicListener{protocol: strings.ToUpper(m.get("Protocol")), instanceProtocol: strings.ToUpper(m.get("InstanceProtocol")),
			certificate: m.get("SSLCertificateId")}
		var ok1, ok2 bool
		l.port, ok1 = m.int32("LoadBalancerPort")
		l.instancePort, ok2 = m.int32("InstancePort")
		if !ok1 || !ok2 || l.protocol == "" {
			return nil, errorf(http.StatusBadRequest, "ValidationError", "a listener needs Protocol, LoadBalancerPort and InstancePort")
		}
		if !slices.Contains([]string{"HTTP", "HTTPS", "TCP", "SSL"}, l.protocol) {
			return nil, errorf(http.StatusBadRequest, "UnsupportedProtocol", "The specified protocol %s is not supported", l.protocol)
		}
		if l.instanceProtocol == "" {
			l.instanceProtocol = l.protocol
		}
		out = append(out, l)
	}
	return out, nil
}

// checkSubnets: every subnet exists, one per zone, all in one VPC; it
// returns the VPC.
func (e *Emulator) checkSubnets(ids []string) (string, error) {
	vpc, zones := "", map[string]bool{}
	for _, id := range ids {
		s, ok := e.subnets[id]
		if !ok {
			return "", errorf(http.StatusBadRequest, "SubnetNotFound", "One or more of the specified subnets do not exist: %s", id)
		}
		if zones[s.AZ] {
			return "", errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "Only one subnet per Availability Zone may be specified")
		}
		zones[s.AZ] = true
		if vpc != "" && s.VPCID != vpc {
			return "", errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "Subnets must be in the same VPC")
		}
		vpc = s.VPCID
	}
	return vpc, nil
}

func (e *Emulator) checkGroups(ids []string) error {
	for _, id := range ids {
		if _, ok := e.sgs[id]; !ok {
			return errorf(http.StatusBadRequest, "InvalidSecurityGroup", "One or more of the specified security groups do not exist: %s", id)
		}
	}
	return nil
}

// classicCreate makes a load balancer whose health check is AWS's
// default for one made through the API: TCP to the first listener's
// instance port every 30 s, timeout 5 s, unhealthy after 2 and healthy
// after 10 checks (User Guide for Classic Load Balancers, "Health checks
// for your Classic Load Balancer": interval 30, timeout 5, thresholds 2
// and 10; the TCP target is an assumption: the guide's default pings
// HTTP:80/index.html, a console setting). A second load balancer of the
// same name is refused (DuplicateLoadBalancerName).
func (e *Emulator) classicCreate(p params) (any, error) {
	name := p.get("LoadBalancerName")
	if !classicName.MatchString(name) {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "Load balancer name '%s' must be 1 to 32 alphanumeric characters or hyphens, not beginning or ending with a hyphen", name)
	}
	if _, ok := e.classic[name]; ok {
		return nil, errorf(http.StatusBadRequest, "DuplicateLoadBalancerName", "Load balancer name '%s' already exists for this account", name)
	}
	listeners, err := readListeners(p)
	if err != nil {
		return nil, err
	}
	if len(listeners) == 0 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "At least one listener must be specified")
	}
	subnets := p.strings("Subnets")
	if len(subnets) == 0 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "the emulator serves load balancers in a VPC: subnets must be specified")
	}
	vpc, err := e.checkSubnets(subnets)
	if err != nil {
		return nil, err
	}
	sgs := p.strings("SecurityGroups")
	if err := e.checkGroups(sgs); err != nil {
		return nil, err
	}
	tags := elbTags(p)
	if len(tags) > classicMaxTags {
		return nil, errorf(http.StatusBadRequest, "TooManyTags", "Quota exceeded for the number of tags per load balancer")
	}
	lb := &classicLB{name: name, scheme: "internet-facing", vpc: vpc, created: e.opts.Now(), subnets: subnets,
		securityGroups: sgs, attrs: newClassicAttributes(), backends: map[int32][]string{}, tags: tags,
		health: classicHealthCheck{target: fmt.Sprintf("TCP:%d", listeners[0].instancePort), interval: 30, timeout: 5, unhealthy: 2, healthy: 10}}
	if s := p.get("Scheme"); s != "" {
		if s != "internal" && s != "internet-facing" {
			return nil, errorf(http.StatusBadRequest, "InvalidScheme", "Invalid scheme '%s'", s)
		}
		lb.scheme = s
	}
	for _, l := range listeners {
		if err := lb.addListener(l); err != nil {
			return nil, err
		}
	}
	// DNS names as the User Guide shows them:
	// my-load-balancer-1234567890.us-west-2.elb.amazonaws.com, internal-… for internal ones.
	e.seq++
	lb.dnsName = fmt.Sprintf("%s-%010d.%s.elb.amazonaws.com", name, e.seq%10_000_000_000, e.opts.Region)
	if lb.scheme == "internal" {
		lb.dnsName = "internal-" + lb.dnsName
	}
	e.classic[name] = lb
	return struct {
		DNSName string `xml:"DNSName"`
	}{lb.dnsName}, nil
}

// addListener adds l, or accepts it again unchanged; another listener on
// the same port is DuplicateListener.
func (lb *classicLB) addListener(l classicListener) error {
	i := slices.IndexFunc(lb.listeners, func(o classicListener) bool { return o.port == l.port })
	if i >= 0 {
		o := lb.listeners[i]
		if o.protocol == l.protocol && o.instanceProtocol == l.instanceProtocol && o.instancePort == l.instancePort && o.certificate == l.certificate {
			return nil
		}
		return errorf(http.StatusBadRequest, "DuplicateListener", "A listener already exists for %s with LoadBalancerPort %d, but with a different InstancePort, Protocol, or SSLCertificateId", lb.name, l.port)
	}
	lb.listeners = append(lb.listeners, l)
	slices.SortFunc(lb.listeners, func(a, b classicListener) int { return int(a.port - b.port) })
	return nil
}

// classicDescribe: the named load balancers (all when none is named); a
// name it does not hold fails the whole call with LoadBalancerNotFound,
// which the CCM takes for "create it" (aws.go describeLoadBalancer :1150).
func (e *Emulator) classicDescribe(p params) (any, error) {
	names := p.strings("LoadBalancerNames")
	if len(names) == 0 {
		names = sortedKeys(e.classic)
	}
	var out []xmlLoadBalancerDescription
	for _, n := range names {
		lb, err := e.classicLB(n)
		if err != nil {
			return nil, err
		}
		out = append(out, e.classicDoc(lb))
	}
	return struct {
		LoadBalancerDescriptions []xmlLoadBalancerDescription `xml:"LoadBalancerDescriptions>member"`
	}{out}, nil
}

// classicDelete: "If the load balancer does not exist or has already been
// deleted, the call to DeleteLoadBalancer still succeeds" (API reference).
func (e *Emulator) classicDelete(p params) (any, error) {
	delete(e.classic, p.get("LoadBalancerName"))
	return nil, nil
}

func (e *Emulator) classicCreateListeners(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	listeners, err := readListeners(p)
	if err != nil {
		return nil, err
	}
	next := *lb
	next.listeners = slices.Clone(lb.listeners)
	for _, l := range listeners {
		if err := next.addListener(l); err != nil {
			return nil, err
		}
	}
	lb.listeners = next.listeners
	return nil, nil
}

func (e *Emulator) classicDeleteListeners(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	for _, s := range p.strings("LoadBalancerPorts") {
		port := atoi32(s, -1)
		lb.listeners = slices.DeleteFunc(lb.listeners, func(l classicListener) bool { return l.port == port })
	}
	return nil, nil
}

func (e *Emulator) classicAttachSubnets(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	next := slices.Clone(lb.subnets)
	for _, s := range p.strings("Subnets") {
		if !slices.Contains(next, s) {
			next = append(next, s)
		}
	}
	vpc, err := e.checkSubnets(next)
	if err != nil {
		return nil, err
	}
	if vpc != lb.vpc {
		return nil, errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "Subnets must be in the load balancer's VPC %s", lb.vpc)
	}
	lb.subnets = next
	return subnetsDoc(lb.subnets), nil
}

func (e *Emulator) classicDetachSubnets(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	drop := p.strings("Subnets")
	next := slices.DeleteFunc(slices.Clone(lb.subnets), func(s string) bool { return slices.Contains(drop, s) })
	if len(next) == 0 {
		return nil, errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "A load balancer must remain attached to at least one subnet")
	}
	lb.subnets = next
	return subnetsDoc(lb.subnets), nil
}

func subnetsDoc(subnets []string) any {
	return struct {
		Subnets []string `xml:"Subnets>member"`
	}{subnets}
}

// classicApplySecurityGroups replaces the groups ("replaces the existing
// security groups", API reference).
func (e *Emulator) classicApplySecurityGroups(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	sgs := p.strings("SecurityGroups")
	if err := e.checkGroups(sgs); err != nil {
		return nil, err
	}
	lb.securityGroups = sgs
	return struct {
		SecurityGroups []string `xml:"SecurityGroups>member"`
	}{sgs}, nil
}
