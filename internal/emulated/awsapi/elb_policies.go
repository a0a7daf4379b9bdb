package awsapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The classic ELB's attributes, health check, instances, policies and
// tags (API reference, version 2012-06-01).

type classicHealthCheck struct {
	target                                string
	interval, timeout, unhealthy, healthy int32
}

type xmlHealthCheck struct {
	Target             string `xml:"Target"`
	Interval           int32  `xml:"Interval"`
	Timeout            int32  `xml:"Timeout"`
	UnhealthyThreshold int32  `xml:"UnhealthyThreshold"`
	HealthyThreshold   int32  `xml:"HealthyThreshold"`
}

func (h classicHealthCheck) doc() xmlHealthCheck {
	return xmlHealthCheck{Target: h.target, Interval: h.interval, Timeout: h.timeout, UnhealthyThreshold: h.unhealthy, HealthyThreshold: h.healthy}
}

type xmlClassicAttributes struct {
	AccessLog struct {
		Enabled        bool    `xml:"Enabled"`
		EmitInterval   *int32  `xml:"EmitInterval,omitempty"`
		S3BucketName   *string `xml:"S3BucketName,omitempty"`
		S3BucketPrefix *string `xml:"S3BucketPrefix,omitempty"`
	} `xml:"AccessLog"`
	ConnectionDraining struct {
		Enabled bool  `xml:"Enabled"`
		Timeout int32 `xml:"Timeout"`
	} `xml:"ConnectionDraining"`
	IdleTimeout          int32    `xml:"ConnectionSettings>IdleTimeout"`
	CrossZone            bool     `xml:"CrossZoneLoadBalancing>Enabled"`
	AdditionalAttributes []xmlTag `xml:"AdditionalAttributes>member"`
}

func (a classicAttributes) doc() xmlClassicAttributes {
	var d xmlClassicAttributes
	d.AccessLog.Enabled, d.AccessLog.EmitInterval, d.AccessLog.S3BucketName, d.AccessLog.S3BucketPrefix = a.accessLog, a.emitInterval, a.bucket, a.prefix
	d.ConnectionDraining.Enabled, d.ConnectionDraining.Timeout = a.draining, a.drainingTimeout
	d.IdleTimeout, d.CrossZone = a.idleTimeout, a.crossZone
	for _, x := range a.additional {
		d.AdditionalAttributes = append(d.AdditionalAttributes, xmlTag{x.k, x.v})
	}
	return d
}

func (e *Emulator) classicDescribeAttributes(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	return struct {
		LoadBalancerAttributes xmlClassicAttributes `xml:"LoadBalancerAttributes"`
	}{lb.attrs.doc()}, nil
}

// classicModifyAttributes changes the parts the request names and keeps
// the rest: a ConnectionDraining without Timeout keeps the timeout (moto
// 5.2.1 keeps 300 likewise), no AdditionalAttributes keeps them.
func (e *Emulator) classicModifyAttributes(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	a := p.sub("LoadBalancerAttributes")
	next := lb.attrs
	boolOf := func(q params, name string) (bool, error) {
		b, err := strconv.ParseBool(q.get(name))
		if err != nil {
			return false, errorf(http.StatusBadRequest, "ValidationError", "%s%s: not a boolean: %q", q.prefix, name, q.get(name))
		}
		return b, nil
	}
	if al := a.sub("AccessLog"); al.has("Enabled") {
		if next.accessLog, err = boolOf(al, "Enabled"); err != nil {
			return nil, err
		}
		if n, ok := al.int32("EmitInterval"); ok {
			next.emitInterval = &n
		}
		if al.has("S3BucketName") {
			next.bucket = ptr(al.get("S3BucketName"))
		}
		if al.has("S3BucketPrefix") {
			next.prefix = ptr(al.get("S3BucketPrefix"))
		}
	}
	if cd := a.sub("ConnectionDraining"); cd.has("Enabled") {
		if next.draining, err = boolOf(cd, "Enabled"); err != nil {
			return nil, err
		}
		if n, ok := cd.int32("Timeout"); ok {
			if n < 1 || n > 3600 {
				return nil, errorf(http.StatusBadRequest, "ValidationError", "ConnectionDraining timeout must be 1 to 3600 seconds")
			}
			next.drainingTimeout = n
		}
	}
	if n, ok := a.sub("ConnectionSettings").int32("IdleTimeout"); ok {
		if n < 1 || n > 4000 {
			return nil, errorf(http.StatusBadRequest, "ValidationError", "IdleTimeout must be 1 to 4000 seconds")
		}
		next.idleTimeout = n
	}
	if cz := a.sub("CrossZoneLoadBalancing"); cz.has("Enabled") {
		if next.crossZone, err = boolOf(cz, "Enabled"); err != nil {
			return nil, err
		}
	}
	if items := a.items("AdditionalAttributes"); len(items) > 0 {
		next.additional = slices.Clone(lb.attrs.additional)
		for _, it := range items {
			k, v := it.get("Key"), it.get("Value")
			if k != "elb.http.desyncmitigationmode" { // the one key the API reference lists
				return nil, errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "Key %s not valid", k)
			}
			i := slices.IndexFunc(next.additional, func(x kv) bool { return x.k == k })
			if i < 0 {
				next.additional = append(next.additional, kv{k, v})
			} else {
				next.additional[i].v = v
			}
		}
	}
	lb.attrs = next
	return struct {
		LoadBalancerName       string               `xml:"LoadBalancerName"`
		LoadBalancerAttributes xmlClassicAttributes `xml:"LoadBalancerAttributes"`
	}{lb.name, lb.attrs.doc()}, nil
}

// classicConfigureHealthCheck replaces the health check. Target is
// PROTOCOL:PORT, with a path for HTTP and HTTPS; the timeout must be
// shorter than the interval (API reference, HealthCheck).
func (e *Emulator) classicConfigureHealthCheck(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	h := p.sub("HealthCheck")
	var c classicHealthCheck
	var ok [4]bool
	c.target = h.get("Target")
	c.interval, ok[0] = h.int32("Interval")
	c.timeout, ok[1] = h.int32("Timeout")
	c.unhealthy, ok[2] = h.int32("UnhealthyThreshold")
	c.healthy, ok[3] = h.int32("HealthyThreshold")
	if slices.Contains(ok[:], false) || !validTarget(c.target) {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "HealthCheck needs Target PROTOCOL:PORT[/PATH], Interval, Timeout and both thresholds")
	}
	if c.timeout >= c.interval || c.interval < 5 || c.interval > 300 || c.timeout < 2 || c.timeout > 60 ||
		c.healthy < 2 || c.healthy > 10 || c.unhealthy < 2 || c.unhealthy > 10 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "HealthCheck interval 5-300, timeout 2-60 and below the interval, thresholds 2-10")
	}
	lb.health = c
	return struct {
		HealthCheck xmlHealthCheck `xml:"HealthCheck"`
	}{c.doc()}, nil
}

func validTarget(t string) bool {
	proto, rest, ok := strings.Cut(t, ":")
	if !ok {
		return false
	}
	port, path, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return false
	}
	switch proto {
	case "HTTP", "HTTPS":
		return true
	case "TCP", "SSL":
		return path == "" && !strings.Contains(rest, "/")
	}
	return false
}

func instancesDoc(ids []string) any {
	var out []xmlClassicInstance
	for _, id := range ids {
		out = append(out, xmlClassicInstance{id})
	}
	return struct {
		Instances []xmlClassicInstance `xml:"Instances>member"`
	}{out}
}

// requestInstances reads Instances.member.N; an instance the account does
// not have is InvalidInstance ("The specified endpoint is not valid").
func (e *Emulator) requestInstances(p params) ([]string, error) {
	var ids []string
	for _, it := range p.items("Instances") {
		id := it.get("InstanceId")
		if _, ok := e.instances[id]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidInstance", "The specified instances %s are not valid", id)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// classicRegister adds the instances (registering one again changes
// nothing) and answers every instance registered.
func (e *Emulator) classicRegister(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	ids, err := e.requestInstances(p)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !slices.Contains(lb.instances, id) {
			lb.instances = append(lb.instances, id)
		}
	}
	return instancesDoc(lb.instances), nil
}

// classicDeregister removes them and answers the instances left.
func (e *Emulator) classicDeregister(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	ids, err := e.requestInstances(p)
	if err != nil {
		return nil, err
	}
	lb.instances = slices.DeleteFunc(lb.instances, func(id string) bool { return slices.Contains(ids, id) })
	return instancesDoc(lb.instances), nil
}

type classicPolicy struct {
	name, typeName string
	attrs          []kv
}

// policyTypes are the load balancer policy types AWS defines
// (DescribeLoadBalancerPolicyTypes; User Guide for Classic Load Balancers).
var policyTypes = []string{"ProxyProtocolPolicyType", "SSLNegotiationPolicyType", "BackendServerAuthenticationPolicyType",
	"PublicKeyPolicyType", "AppCookieStickinessPolicyType", "LBCookieStickinessPolicyType"}

// classicCreatePolicy adds a policy. A policy of the same name is
// DuplicatePolicyName (API reference) unless it is the same policy again:
// that is accepted and changes nothing, as cloud-provider-aws reports of
// AWS ("the aws-sdk does not seem to return an error to us in these
// cases", aws_loadbalancer.go:1328-1337 at v1.37.1, which creates its proxy
// protocol policy on every sync).
func (e *Emulator) classicCreatePolicy(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	pol := classicPolicy{name: p.get("PolicyName"), typeName: p.get("PolicyTypeName")}
	if !slices.Contains(policyTypes, pol.typeName) {
		return nil, errorf(http.StatusBadRequest, "PolicyTypeNotFound", "One or more of the specified policy types do not exist: %s", pol.typeName)
	}
	for _, a := range p.items("PolicyAttributes") {
		pol.attrs = append(pol.attrs, kv{a.get("AttributeName"), a.get("AttributeValue")})
	}
	if i := slices.IndexFunc(lb.policies, func(o classicPolicy) bool { return o.name == pol.name }); i >= 0 {
		if o := lb.policies[i]; o.typeName == pol.typeName && slices.Equal(o.attrs, pol.attrs) {
			return nil, nil
		}
		return nil, errorf(http.StatusBadRequest, "DuplicatePolicyName", "Policy name %s already exists for load balancer %s", pol.name, lb.name)
	}
	lb.policies = append(lb.policies, pol)
	return nil, nil
}

func (e *Emulator) classicDescribePolicies(p params) (any, error) {
	type attr struct {
		Name  string `xml:"AttributeName"`
		Value string `xml:"AttributeValue"`
	}
	type desc struct {
		PolicyName     string `xml:"PolicyName"`
		PolicyTypeName string `xml:"PolicyTypeName"`
		Attributes     []attr `xml:"PolicyAttributeDescriptions>member"`
	}
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	names := p.strings("PolicyNames")
	var out []desc
	for _, pol := range lb.policies {
		if len(names) > 0 && !slices.Contains(names, pol.name) {
			continue
		}
		d := desc{PolicyName: pol.name, PolicyTypeName: pol.typeName}
		for _, a := range pol.attrs {
			d.Attributes = append(d.Attributes, attr{a.k, a.v})
		}
		out = append(out, d)
	}
	if len(out) < len(names) { // a named policy the load balancer does not have
		return nil, errorf(http.StatusBadRequest, "PolicyNotFound", "One or more of the specified policies do not exist: %s", strings.Join(names, ", "))
	}
	return struct {
		PolicyDescriptions []desc `xml:"PolicyDescriptions>member"`
	}{out}, nil
}

// policyNames reads PolicyNames, every one of which must exist.
func (lb *classicLB) policyNames(p params) ([]string, error) {
	names := p.strings("PolicyNames")
	for _, n := range names {
		if !slices.ContainsFunc(lb.policies, func(o classicPolicy) bool { return o.name == n }) {
			return nil, errorf(http.StatusBadRequest, "PolicyNotFound", "There is no policy with name %s for load balancer %s", n, lb.name)
		}
	}
	return names, nil
}

// classicSetListenerPolicies replaces the listener's policies (an empty
// list removes them all).
func (e *Emulator) classicSetListenerPolicies(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	port, _ := p.int32("LoadBalancerPort")
	i := slices.IndexFunc(lb.listeners, func(l classicListener) bool { return l.port == port })
	if i < 0 {
		return nil, errorf(http.StatusBadRequest, "ListenerNotFound", "There is no listener on port %d of load balancer %s", port, lb.name)
	}
	names, err := lb.policyNames(p)
	if err != nil {
		return nil, err
	}
	lb.listeners[i].policies = names
	return nil, nil
}

// classicSetBackendPolicies replaces the policies of an instance port; an
// empty list removes the port's backend description.
func (e *Emulator) classicSetBackendPolicies(p params) (any, error) {
	lb, err := e.classicLB(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	port, ok := p.int32("InstancePort")
	if !ok {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "InstancePort is required")
	}
	names, err := lb.policyNames(p)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		delete(lb.backends, port)
	} else {
		lb.backends[port] = names
	}
	return nil, nil
}

// classicAddTags adds or overwrites tags on every named load balancer,
// all or none.
func (e *Emulator) classicAddTags(p params) (any, error) {
	var lbs []*classicLB
	for _, n := range p.strings("LoadBalancerNames") {
		lb, err := e.classicLB(n)
		if err != nil {
			return nil, err
		}
		next := clone(lb.tags)
		for k, v := range elbTags(p) {
			next[k] = v
		}
		if len(next) > classicMaxTags {
			return nil, errorf(http.StatusBadRequest, "TooManyTags", "Quota exceeded for the number of tags per load balancer %s", n)
		}
		lbs = append(lbs, lb)
	}
	for _, lb := range lbs {
		for k, v := range elbTags(p) {
			lb.tags[k] = v
		}
	}
	return nil, nil
}

func (e *Emulator) classicRemoveTags(p params) (any, error) {
	for _, n := range p.strings("LoadBalancerNames") {
		lb, err := e.classicLB(n)
		if err != nil {
			return nil, err
		}
		for _, t := range p.items("Tags") {
			delete(lb.tags, t.get("Key"))
		}
	}
	return nil, nil
}

func (e *Emulator) classicDescribeTags(p params) (any, error) {
	type desc struct {
		LoadBalancerName string   `xml:"LoadBalancerName"`
		Tags             []xmlTag `xml:"Tags>member"`
	}
	var out []desc
	for _, n := range p.strings("LoadBalancerNames") {
		lb, err := e.classicLB(n)
		if err != nil {
			return nil, err
		}
		d := desc{LoadBalancerName: n}
		for _, k := range sortedKeys(lb.tags) {
			d.Tags = append(d.Tags, xmlTag{k, lb.tags[k]})
		}
		out = append(out, d)
	}
	return struct {
		TagDescriptions []desc `xml:"TagDescriptions>member"`
	}{out}, nil
}
