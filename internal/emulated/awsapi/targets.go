package awsapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Target groups and their targets: the ELBv2 operations, and what the lab
// reads of them (TargetHealth, Receiving). Every target's health is a Life
// (targethealth.go) advanced to the emulator's clock before it is read.

type targetGroup struct {
	arn, name, protocol, vpc, targetType string
	port                                 int32
	hc                                   healthCheck
	attrs                                map[string]string
	members                              []*member // registration order
}

type member struct {
	target Target
	life   *Life
}

type healthCheck struct {
	protocol, port, path, matcher string
	interval, timeout             int32
	healthy, unhealthy            int32
}

func (h healthCheck) spec() CheckSpec {
	return CheckSpec{Interval: time.Duration(h.interval) * time.Second,
		HealthyThreshold: int(h.healthy), UnhealthyThreshold: int(h.unhealthy)}
}

// nlbTargetGroupAttributes are a new NLB instance target group's
// attributes (API reference, TargetGroupAttribute).
var nlbTargetGroupAttributes = map[string]string{
	deregistrationDelayKey:                                                           "300",
	"deregistration_delay.connection_termination.enabled":                            "false",
	"proxy_protocol_v2.enabled":                                                      "false",
	"preserve_client_ip.enabled":                                                     "true",
	"stickiness.enabled":                                                             "false",
	"stickiness.type":                                                                "source_ip",
	"load_balancing.cross_zone.enabled":                                              "use_load_balancer_configuration",
	"target_health_state.unhealthy.connection_termination.enabled":                   "true",
	"target_health_state.unhealthy.draining_interval_seconds":                        "0",
	"target_group_health.dns_failover.minimum_healthy_targets.count":                 "1",
	"target_group_health.dns_failover.minimum_healthy_targets.percentage":            "off",
	"target_group_health.unhealthy_state_routing.minimum_healthy_targets.count":      "1",
	"target_group_health.unhealthy_state_routing.minimum_healthy_targets.percentage": "off",
}

const deregistrationDelayKey = "deregistration_delay.timeout_seconds"

type xmlTargetGroup struct {
	TargetGroupArn             string   `xml:"TargetGroupArn"`
	TargetGroupName            string   `xml:"TargetGroupName"`
	Protocol                   string   `xml:"Protocol"`
	Port                       int32    `xml:"Port"`
	VpcID                      string   `xml:"VpcId"`
	HealthCheckProtocol        string   `xml:"HealthCheckProtocol"`
	HealthCheckPort            string   `xml:"HealthCheckPort"`
	HealthCheckEnabled         bool     `xml:"HealthCheckEnabled"`
	HealthCheckIntervalSeconds int32    `xml:"HealthCheckIntervalSeconds"`
	HealthCheckTimeoutSeconds  int32    `xml:"HealthCheckTimeoutSeconds"`
	HealthyThresholdCount      int32    `xml:"HealthyThresholdCount"`
	UnhealthyThresholdCount    int32    `xml:"UnhealthyThresholdCount"`
	HealthCheckPath            string   `xml:"HealthCheckPath,omitempty"`
	Matcher                    string   `xml:"Matcher>HttpCode,omitempty"`
	LoadBalancerArns           []string `xml:"LoadBalancerArns>member"`
	TargetType                 string   `xml:"TargetType"`
	IPAddressType              string   `xml:"IpAddressType"`
}

type targetGroupsDoc struct {
	TargetGroups []xmlTargetGroup `xml:"TargetGroups>member"`
}

func (e *Emulator) tgDoc(tg *targetGroup) xmlTargetGroup {
	return xmlTargetGroup{
		TargetGroupArn: tg.arn, TargetGroupName: tg.name, Protocol: tg.protocol, Port: tg.port, VpcID: tg.vpc,
		HealthCheckProtocol: tg.hc.protocol, HealthCheckPort: tg.hc.port, HealthCheckEnabled: true,
		HealthCheckIntervalSeconds: tg.hc.interval, HealthCheckTimeoutSeconds: tg.hc.timeout,
		HealthyThresholdCount: tg.hc.healthy, UnhealthyThresholdCount: tg.hc.unhealthy, HealthCheckPath: tg.hc.path,
		Matcher: tg.hc.matcher, LoadBalancerArns: e.tgLoadBalancers(tg.arn), TargetType: tg.targetType, IPAddressType: "ipv4",
	}
}

// tgLoadBalancers are the load balancers whose listeners forward to arn.
func (e *Emulator) tgLoadBalancers(arn string) []string {
	var out []string
	for _, la := range sortedKeys(e.listeners) {
		if l := e.listeners[la]; l.tgARN == arn && !slices.Contains(out, l.lbARN) {
			out = append(out, l.lbARN)
		}
	}
	return out
}

// healthCheckFields reads the health check settings of CreateTargetGroup
// and ModifyTargetGroup into h.
func healthCheckFields(h *healthCheck, p params) {
	if v := p.get("HealthCheckProtocol"); v != "" {
		h.protocol = v
	}
	if v := p.get("HealthCheckPort"); v != "" {
		h.port = v
	}
	if p.has("HealthCheckPath") {
		h.path = p.get("HealthCheckPath")
	}
	if v := p.sub("Matcher").get("HttpCode"); v != "" {
		h.matcher = v
	}
	h.interval = atoi32(p.get("HealthCheckIntervalSeconds"), h.interval)
	h.timeout = atoi32(p.get("HealthCheckTimeoutSeconds"), h.timeout)
	h.healthy = atoi32(p.get("HealthyThresholdCount"), h.healthy)
	h.unhealthy = atoi32(p.get("UnhealthyThresholdCount"), h.unhealthy)
}

// healthCheckRanges are the ranges CreateTargetGroup and ModifyTargetGroup
// accept for a health check's timing (API reference, CreateTargetGroup:
// HealthCheckIntervalSeconds "Valid Range: Minimum value of 5. Maximum
// value of 300", HealthCheckTimeoutSeconds 2 to 120, HealthyThresholdCount
// and UnhealthyThresholdCount 2 to 10). With Options.HealthCheckRanges, a
// value outside is refused before anything changes, as AWS's input
// validation refuses it; the CCM passes the Service's healthcheck
// annotations through unchecked (buildNLBHealthCheckConfiguration), so
// this is where a bad one fails.
var healthCheckRanges = []struct {
	field    string
	get      func(healthCheck) int32
	min, max int32
}{
	{"healthCheckIntervalSeconds", func(h healthCheck) int32 { return h.interval }, 5, 300},
	{"healthCheckTimeoutSeconds", func(h healthCheck) int32 { return h.timeout }, 2, 120},
	{"healthyThresholdCount", func(h healthCheck) int32 { return h.healthy }, 2, 10},
	{"unhealthyThresholdCount", func(h healthCheck) int32 { return h.unhealthy }, 2, 10},
}

// validHealthCheck refuses a health check whose timing is out of range,
// in AWS's words for a failed constraint, when the emulator checks ranges.
func (e *Emulator) validHealthCheck(h healthCheck) error {
	if !e.opts.HealthCheckRanges {
		return nil
	}
	for _, r := range healthCheckRanges {
		switch v := r.get(h); {
		case v < r.min:
			return errorf(http.StatusBadRequest, "ValidationError",
				"1 validation error detected: Value '%d' at '%s' failed to satisfy constraint: Member must have value greater than or equal to %d", v, r.field, r.min)
		case v > r.max:
			return errorf(http.StatusBadRequest, "ValidationError",
				"1 validation error detected: Value '%d' at '%s' failed to satisfy constraint: Member must have value less than or equal to %d", v, r.field, r.max)
		}
	}
	return nil
}

func (e *Emulator) createTargetGroup(p params) (any, error) {
	name := p.get("Name")
	if name == "" || len(name) > 32 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "Target group name '%s' must be 1 to 32 characters", name)
	}
	port, _ := p.int32("Port")
	tg := &targetGroup{name: name, protocol: p.get("Protocol"), port: port, vpc: p.get("VpcId"),
		targetType: "instance", attrs: clone(nlbTargetGroupAttributes),
		// An NLB target group's health check defaults (ELB docs, "Health
		// checks for Network Load Balancer target groups").
		hc: healthCheck{protocol: "TCP", port: "traffic-port", interval: 30, timeout: 10, healthy: 5, unhealthy: 2}}
	if t := p.get("TargetType"); t != "" {
		tg.targetType = t
	}
	healthCheckFields(&tg.hc, p)
	if tg.hc.protocol == "HTTP" || tg.hc.protocol == "HTTPS" {
		if tg.hc.path == "" {
			tg.hc.path = "/"
		}
		if tg.hc.matcher == "" {
			tg.hc.matcher = "200-399"
		}
		if !p.has("HealthCheckTimeoutSeconds") && tg.hc.protocol == "HTTP" {
			tg.hc.timeout = 6
		}
	}
	if err := e.validHealthCheck(tg.hc); err != nil {
		return nil, err
	}
	for _, o := range e.tgs {
		if o.name == name {
			if o.protocol == tg.protocol && o.port == tg.port && o.vpc == tg.vpc && o.hc == tg.hc {
				return targetGroupsDoc{[]xmlTargetGroup{e.tgDoc(o)}}, nil
			}
			return nil, errorf(http.StatusBadRequest, "DuplicateTargetGroupName", "A target group with the same name '%s' exists, but with different settings", name)
		}
	}
	e.seq++
	tg.arn = fmt.Sprintf("arn:aws:elasticloadbalancing:%s:%s:targetgroup/%s/%016x", e.opts.Region, AccountID, name, e.seq)
	e.tgs[tg.arn] = tg
	e.setTags(tg.arn, elbTags(p))
	return targetGroupsDoc{[]xmlTargetGroup{e.tgDoc(tg)}}, nil
}

func (e *Emulator) tgByARN(arn string) (*targetGroup, error) {
	tg, ok := e.tgs[arn]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "TargetGroupNotFound", "Target groups '%s' not found", arn)
	}
	return tg, nil
}

func (e *Emulator) describeTargetGroups(p params) (any, error) {
	var out []xmlTargetGroup
	arns, names := p.strings("TargetGroupArns"), p.strings("Names")
	switch {
	case len(arns) > 0:
		for _, a := range arns {
			tg, err := e.tgByARN(a)
			if err != nil {
				return nil, err
			}
			out = append(out, e.tgDoc(tg))
		}
	case len(names) > 0:
		for _, n := range names {
			var found *targetGroup
			for _, tg := range e.tgs {
				if tg.name == n {
					found = tg
				}
			}
			if found == nil {
				return nil, errorf(http.StatusBadRequest, "TargetGroupNotFound", "One or more target groups not found")
			}
			out = append(out, e.tgDoc(found))
		}
	default:
		lbARN := p.get("LoadBalancerArn")
		if lbARN != "" {
			if _, err := e.lbByARN(lbARN); err != nil {
				return nil, err
			}
		}
		for _, a := range sortedKeys(e.tgs) {
			if lbARN == "" || slices.Contains(e.tgLoadBalancers(a), lbARN) {
				out = append(out, e.tgDoc(e.tgs[a]))
			}
		}
	}
	return targetGroupsDoc{out}, nil
}

func (e *Emulator) modifyTargetGroup(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	hc := tg.hc
	healthCheckFields(&hc, p)
	if err := e.validHealthCheck(hc); err != nil {
		return nil, err
	}
	e.advance(tg, e.opts.Now())
	tg.hc = hc
	return targetGroupsDoc{[]xmlTargetGroup{e.tgDoc(tg)}}, nil
}

// deleteTargetGroup refuses a group a listener forwards to (ResourceInUse)
// and succeeds for one that is already gone.
func (e *Emulator) deleteTargetGroup(p params) (any, error) {
	arn := p.get("TargetGroupArn")
	if len(e.tgLoadBalancers(arn)) > 0 {
		return nil, errorf(http.StatusBadRequest, "ResourceInUse", "Target group '%s' is currently in use by a listener or a rule", arn)
	}
	delete(e.tgs, arn)
	delete(e.tags, arn)
	return nil, nil
}

func (e *Emulator) describeTargetGroupAttributes(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	return attributesDoc(tg.attrs), nil
}

func (e *Emulator) modifyTargetGroupAttributes(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	for _, a := range p.items("Attributes") {
		if a.get("Key") == deregistrationDelayKey {
			if n, err := strconv.Atoi(a.get("Value")); err != nil || n < 0 || n > 3600 {
				return nil, errorf(http.StatusBadRequest, "ValidationError", "%s must be between 0 and 3600", deregistrationDelayKey)
			}
		}
	}
	if err := modifyAttributes(tg.attrs, p); err != nil {
		return nil, err
	}
	return attributesDoc(tg.attrs), nil
}

func (tg *targetGroup) deregistrationDelay() time.Duration {
	n, _ := strconv.Atoi(tg.attrs[deregistrationDelayKey])
	return time.Duration(n) * time.Second
}

// requestTargets reads Targets.member.N (the port defaults to the group's).
func (tg *targetGroup) requestTargets(p params) []Target {
	var out []Target
	for _, t := range p.items("Targets") {
		port, ok := t.int32("Port")
		if !ok {
			port = tg.port
		}
		out = append(out, Target{ID: t.get("Id"), Port: port})
	}
	return out
}

func (e *Emulator) registerTargets(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	targets := tg.requestTargets(p)
	var invalid []string
	for _, t := range targets {
		if in, ok := e.instances[t.ID]; !ok || in.State != "running" {
			invalid = append(invalid, "'"+t.ID+"'")
		}
	}
	if len(invalid) > 0 {
		return nil, errorf(http.StatusBadRequest, "InvalidTarget",
			"The following targets are not in a running state and cannot be registered: %s", strings.Join(invalid, ", "))
	}
	now := e.opts.Now()
	e.advance(tg, now)
	for _, t := range targets {
		if m := tg.find(t); m != nil && m.life.Deregistered.IsZero() {
			continue // already registered: a no-op
		}
		// A new registration, also of a target still draining (an
		// assumption: AWS does not say whether that cancels the drain).
		tg.members = append(tg.members, &member{target: t, life: NewLife(now, e.opts.RegistrationDelay)})
	}
	return nil, nil
}

// find is the target's current registration, draining included.
func (tg *targetGroup) find(t Target) *member {
	for i := len(tg.members) - 1; i >= 0; i-- {
		if tg.members[i].target == t {
			return tg.members[i]
		}
	}
	return nil
}

func (e *Emulator) deregisterTargets(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	now := e.opts.Now()
	e.advance(tg, now)
	for _, t := range tg.requestTargets(p) {
		if m := tg.find(t); m != nil {
			m.life.Deregister(now, tg.deregistrationDelay())
		}
	}
	return nil, nil
}

// advance runs tg's health checks up to now and forgets the targets whose
// draining ended more than the propagation time ago (until then Receiving
// still needs their past).
func (e *Emulator) advance(tg *targetGroup, now time.Time) {
	spec := tg.hc.spec()
	kept := tg.members[:0]
	for _, m := range tg.members {
		req := e.probeRequest(tg, m.target)
		m.life.Advance(now, spec, func(at time.Time) CheckResult { return e.opts.Probe(req, at) })
		if !m.life.Gone(now.Add(-e.opts.Propagation)) {
			kept = append(kept, m)
		}
	}
	tg.members = kept
}

func (e *Emulator) probeRequest(tg *targetGroup, t Target) ProbeRequest {
	req := ProbeRequest{TargetGroupARN: tg.arn, Target: t, Port: t.Port, Protocol: tg.hc.protocol, Path: tg.hc.path}
	if n, err := strconv.ParseInt(tg.hc.port, 10, 32); err == nil {
		req.Port = int32(n)
	}
	if in, ok := e.instances[t.ID]; ok {
		req.IP = in.PrivateIP
	}
	return req
}

type xmlTargetHealth struct {
	Target struct {
		ID   string `xml:"Id"`
		Port int32  `xml:"Port"`
	} `xml:"Target"`
	HealthCheckPort string `xml:"HealthCheckPort"`
	TargetHealth    struct {
		State       string `xml:"State"`
		Reason      string `xml:"Reason,omitempty"`
		Description string `xml:"Description,omitempty"`
	} `xml:"TargetHealth"`
}

func (e *Emulator) describeTargetHealth(p params) (any, error) {
	tg, err := e.tgByARN(p.get("TargetGroupArn"))
	if err != nil {
		return nil, err
	}
	now := e.opts.Now()
	e.advance(tg, now)
	var out []xmlTargetHealth
	for _, s := range e.targetStatuses(tg, now, tg.requestTargets(p)) {
		var d xmlTargetHealth
		d.Target.ID, d.Target.Port = s.Target.ID, s.Target.Port
		d.HealthCheckPort = strconv.Itoa(int(e.probeRequest(tg, s.Target).Port))
		d.TargetHealth.State, d.TargetHealth.Reason, d.TargetHealth.Description = string(s.State), string(s.Reason), s.Description
		out = append(out, d)
	}
	return struct {
		TargetHealthDescriptions []xmlTargetHealth `xml:"TargetHealthDescriptions>member"`
	}{out}, nil
}

// TargetStatus is a target and what DescribeTargetHealth says of it.
type TargetStatus struct {
	Target Target
	Status
}

// targetStatuses: asked is the targets named in the request (none: every
// registered one). A group no listener forwards to has its registered
// targets unused with Target.NotInUse; a named target that is not
// registered is unused with Target.NotRegistered.
func (e *Emulator) targetStatuses(tg *targetGroup, now time.Time, asked []Target) []TargetStatus {
	inUse := len(e.tgLoadBalancers(tg.arn)) > 0
	statusOf := func(m *member) (Status, bool) {
		s, ok := m.life.StatusAt(now)
		if ok && !inUse && s.State != StateDraining {
			s = status(StateUnused, ReasonNotInUse)
		}
		return s, ok
	}
	var out []TargetStatus
	if len(asked) == 0 {
		for _, m := range tg.members {
			if s, ok := statusOf(m); ok {
				out = append(out, TargetStatus{m.target, s})
			}
		}
		return out
	}
	for _, t := range asked {
		s, ok := Status{}, false
		if m := tg.find(t); m != nil {
			s, ok = statusOf(m)
		}
		if !ok {
			s = status(StateUnused, ReasonNotRegistered)
		}
		out = append(out, TargetStatus{t, s})
	}
	return out
}

// TargetHealth is what DescribeTargetHealth would answer now for the
// target group: its registered targets, in registration order.
func (e *Emulator) TargetHealth(tgARN string) ([]TargetStatus, error) {
	var out []TargetStatus
	err := e.withGroup(tgARN, func(tg *targetGroup, now time.Time) { out = e.targetStatuses(tg, now, nil) })
	return out, err
}

// Receiving is the targets of the target group that would receive new
// connections at the emulator's current time (Receiving in
// targethealth.go, with the emulator's propagation time); a group no
// listener forwards to receives nothing.
func (e *Emulator) Receiving(tgARN string) ([]Target, error) {
	var out []Target
	err := e.withGroup(tgARN, func(tg *targetGroup, now time.Time) {
		if len(e.tgLoadBalancers(tg.arn)) == 0 {
			return
		}
		members := make([]Member, len(tg.members))
		for i, m := range tg.members {
			members[i] = Member{Target: m.target, Life: m.life}
		}
		out = Receiving(members, now, e.opts.Propagation)
	})
	return out, err
}

// withGroup runs f on the target group advanced to now, under the lock.
func (e *Emulator) withGroup(tgARN string, f func(tg *targetGroup, now time.Time)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	tg, err := e.tgByARN(tgARN)
	if err != nil {
		return err
	}
	now := e.opts.Now()
	e.advance(tg, now)
	f(tg, now)
	return nil
}
